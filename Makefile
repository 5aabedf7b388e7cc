# duecollector — common tasks. `make help` lists them.
GO        ?= go
BIN       ?= bin/collector
PKG       := ./cmd/collector
DEV_BIN   ?= bin/collector-dev
DEV_PKG   := ./cmd/collector-dev
STATICCHECK_VERSION ?= v0.8.2
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
DATE      ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(DATE)

.PHONY: help build build-dev test test-short demo lint lint-staticcheck vet fmt bench ci clean alerts-test

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: ## build the collector binary into bin/ (what production ships)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) $(PKG)

build-dev: ## build collector-dev into bin/: collector plus demo and sim (the simulator)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DEV_BIN) $(DEV_PKG)

test: ## run every test against the local PostgreSQL (race detector on)
	$(GO) test -race -count=1 -timeout 30m ./...

# The packages whose tests need no database: none of their tests imports storetest. Listed at
# each run, so a new package lands on the right side by itself.
PURE_PKGS = $(shell $(GO) list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | awk '!/storetest/ {print $$1}')

test-short: ## inner loop, seconds: -short tests of the packages that need no database
	$(GO) test -short $(PURE_PKGS)

demo: ## the main job on the embedded default: simulator, in-process Kafka, demo items
	$(GO) run $(DEV_PKG) demo

vet: ## go vet
	$(GO) vet ./...

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

lint-staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

lint: vet lint-staticcheck ## go vet + staticcheck
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

bench: ## benchmark suite vs River and raw-SQL ceilings; writes BENCHMARKS.md (BENCH_QUICK=1: ~2 min CI version; BENCH_ONLY=history,cycle: only those sections)
	$(GO) run ./tools/bench

alerts-test: ## promtool: check and unit-test deploy/prometheus/alerts.yml; metric names in it and the Grafana dashboard
	promtool check config deploy/prometheus/prometheus.yml
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml
	$(GO) test -count=1 -run 'TestAlerts|TestDashboard|TestRulesWithPromtool|TestCompose' ./internal/telemetry/

ci: ## what CI runs
	bash .ci/run

clean:
	rm -rf bin

.PHONY: faults
faults: ## fault suite against real processes (simulator, local PostgreSQL, in-process Kafka)
	$(GO) run ./tools/faults
