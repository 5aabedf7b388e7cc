# syntax=docker/dockerfile:1
# Multi-stage build: a static collector binary on distroless, running as a non-root user.
#   docker build -t duecollector --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse --short HEAD) --build-arg BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
#   docker run --rm duecollector version

# The builder runs natively and cross-compiles (docker buildx build --platform linux/amd64,linux/arm64).
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Dependencies first: this layer is reused until go.mod/go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
ARG BUILD_DATE=unknown
ARG TARGETOS=linux
ARG TARGETARCH
# Static (no cgo), stripped, reproducible paths; the same ldflags as the Makefile. The shipped
# image is collector alone; collector-dev (the compose stack's simulator) is the dev target below.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} GOFLAGS=-buildvcs=false go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.buildDate=${BUILD_DATE}" \
      -o /out/collector ./cmd/collector

# collector-dev (collector plus demo and sim) for the compose stack's simulator only; the
# default target below never builds it: docker build --target dev -t duecollector-dev .
FROM build AS build-dev
ARG VERSION=dev
ARG COMMIT=unknown
ARG BUILD_DATE=unknown
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} GOFLAGS=-buildvcs=false go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.buildDate=${BUILD_DATE}" \
      -o /out/collector-dev ./cmd/collector-dev

FROM gcr.io/distroless/static-debian12:nonroot AS dev
COPY --from=build-dev /out/collector-dev /usr/local/bin/collector-dev
USER nonroot:nonroot
ENTRYPOINT ["collector-dev"]
CMD ["sim", "--addr", "0.0.0.0:8080"]

# distroless/static: CA certificates (for https://api.neople.co.kr), tzdata, /etc/passwd with
# the nonroot user (65532) and nothing else — no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG COMMIT=unknown
ARG BUILD_DATE=unknown
LABEL org.opencontainers.image.title="duecollector" \
      org.opencontainers.image.description="Collects tracked Neople auction items when the database says they are due; outbox relay to Kafka" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.base.name="gcr.io/distroless/static-debian12:nonroot"
WORKDIR /app
COPY --from=build /out/collector /usr/local/bin/collector
# catalog.targets defaults to configs/import-targets.yaml, relative to this WORKDIR.
COPY configs/ /app/configs/
USER nonroot:nonroot
# /metrics, /healthz and /readyz of `collector run` (daemon.http_addr, default :9090).
EXPOSE 9090
# No curl in distroless: the binary probes its own /readyz (daemon.http_addr), which only
# `collector run` serves. A container of this image running anything else (`console`, a long
# `import-items` or `export`) would turn unhealthy: run it with --no-healthcheck (compose:
# `healthcheck: {disable: true}`; Kubernetes ignores HEALTHCHECK and uses its own probes).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["collector", "healthcheck"]
ENTRYPOINT ["collector"]
CMD ["run"]
