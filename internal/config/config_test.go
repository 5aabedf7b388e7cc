package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "collector.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsAreValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func TestPrecedenceFlagEnvFileDefault(t *testing.T) {
	file := writeFile(t, "collect:\n  batch_size: 11\n  concurrency: 3\n  lease: 30s\n")
	t.Setenv("COLLECTOR_COLLECT_CONCURRENCY", "7")
	t.Setenv("COLLECTOR_COLLECT_LEASE", "45s")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Int("concurrency", 0, "")
	fs.Duration("lease", 0, "")
	if err := fs.Parse([]string{"--lease=1m"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Options{File: file, Flags: map[string]*pflag.Flag{
		"collect.concurrency": fs.Lookup("concurrency"), // not set: env wins
		"collect.lease":       fs.Lookup("lease"),       // set: flag wins
	}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Collect.BatchSize != 11 {
		t.Errorf("batch_size = %d, want 11 from the file", cfg.Collect.BatchSize)
	}
	if cfg.Collect.Concurrency != 7 {
		t.Errorf("concurrency = %d, want 7 from env", cfg.Collect.Concurrency)
	}
	if cfg.Collect.Lease.String() != "1m0s" {
		t.Errorf("lease = %v, want 1m from the flag", cfg.Collect.Lease)
	}
	if cfg.Collect.PackSize != 10 {
		t.Errorf("pack_size = %d, want the default 10", cfg.Collect.PackSize)
	}
}

func TestDatabaseURLFallsBackToDATABASE_URL(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://fallback@db/x")
	cfg, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Database.URL != "postgres://fallback@db/x" {
		t.Fatalf("database.url = %q", cfg.Database.URL)
	}
	t.Setenv("COLLECTOR_DATABASE_URL", "postgres://own@db/y")
	cfg, err = Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Database.URL != "postgres://own@db/y" {
		t.Fatalf("COLLECTOR_DATABASE_URL must win over DATABASE_URL, got %q", cfg.Database.URL)
	}
}

func TestBadValuesNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		yaml, want string
	}{
		{"collect:\n  batch_size: 0\n", "collect.batch_size"},
		{"collect:\n  lease: 10ms\n", "collect.lease"},
		{"log:\n  format: xml\n", "log.format"},
		{"provider:\n  base_url: ftp://x\n", "provider.base_url"},
		{"provider:\n  base_url: https://x/?a=b\n", "provider.base_url"},                        // NewClient refuses a query later
		{"provider:\n  base_url: http://API.neople.co.kr.:80/\n", "must be reached over https"}, // the keys in clear text
		{"provider:\n  market:\n    rate: -1\n", "provider.market.rate"},
		{"catalog:\n  default_tier: LUKEWARM\n", "catalog.default_tier"},
		{"catalog:\n  reactivate_tier: COLD_10M\n", "allowed: HOT_1M, ACTIVE_3M, WARM_5M (a reactivated item must be collected more often than COLD_10M)"},
		{"catalog:\n  reactivate_tier: DORMANT\n", "catalog.reactivate_tier"},
		{"kafka:\n  lease: 20s\n", "kafka.lease"},                               // under 3 × kafka.write_timeout (10s)
		{"collect:\n  batchsize: 5\n", "batchsize"},                             // unknown key (typo)
		{"collect:\n  batch_size: [\n", "line"},                                 // YAML syntax error names the line
		{"collect:\n  lease: soon\n", "collect.lease"},                          // wrong type
		{"daemon:\n  budget:\n    slow_start_share: 0.5\n", "slow_start_share"}, // removed: now a constant
		{"history:\n  mode: sometimes\n", "history.mode"},
		{"history:\n  heartbeat: 10s\n", "history.heartbeat"},
		{"history:\n  partition_interval: 5h\n", "history.partition_interval"},              // does not divide a day
		{"history:\n  partition_ahead: 1h\n", "history.partition_ahead"},                    // under one partition
		{"history:\n  maintenance_interval: 1h\n", "maintenance_interval"},                  // removed: now a constant
		{"retention:\n  snapshots: 1h\n", "retention.snapshots"},                            // under catalog.signal_window
		{"history:\n  heartbeat: 48h\nretention:\n  snapshots: 36h\n", "history.heartbeat"}, // under the heartbeat
		{"retention:\n  sales: 1h\n", "retention.sales"},
		{"retention:\n  sales: 48h\n", "catalog.dormant_after"}, // over signal_window, under dormant_after
		{"retention:\n  candles_hourly: 1m\n", "retention.candles_hourly"},
		{"retention:\n  candles_daily: 1h\n", "retention.candles_daily"},
		{"retention:\n  outbox_unpublished: 30m\n", "retention.outbox_unpublished"},                   // under 1h
		{"export:\n  enabled: true\nretention:\n  candles_hourly: 24h\n", "retention.candles_hourly"}, // under the exporter's reach
		{"export:\n  enabled: true\nretention:\n  sales: 96h\n", "at least 193h0m0s while export.enabled"},
		{"outbox:\n  enabled: maybe\n", "outbox.enabled"},
		{"outbox:\n  enabled: false\nkafka:\n  brokers: [k:9092]\n", "outbox.enabled"}, // the daemon would run a relay
		{"api:\n  rate: -1\n", "api.rate"},
		{"database:\n  url: postgres://app:s3cret@db:54x2/x\n", "database.url"},                // retrying would never connect
		{"database:\n  direct_url: 'host=db port=x password=s3cret'\n", "database.direct_url"}, //
		// pgx reads pool_* only in pgxpool, and masks no spaced password in its parse errors.
		{"database:\n  url: 'host=db password = s3cret pool_max_conns=x'\n", "cannot parse pool_max_conns"},
		{"database:\n  url: 'host=db password = s3cret statement_cache_capacity=x'\n", "database.url"},
		{"database:\n  url: 'host=db password=open s3cret dbname=x'\n", "database.url"}, // pgx quotes the word after the space
		{"provider:\n  market:\n    rate: .nan\n", "provider.market.rate"},
		{"daemon:\n  budget:\n    headroom: .nan\n", "daemon.budget.headroom"},
		{"api:\n  rate: .inf\n", "api.rate"},
		{"api:\n  cors_origins: [https://prices.example.org/path]\n", "api.cors_origins"},
		{"api:\n  cors_origins: [prices.example.org]\n", "api.cors_origins"},
		{"api:\n  cors_origins: [https://Prices.Example.org]\n", "as a browser sends it in Origin: https://prices.example.org"}, // never matches Origin
		{"api:\n  cors_origins: ['https://prices.example.org:443']\n", "as a browser sends it in Origin: https://prices.example.org"},
		{"provider:\n  timeout: 10\n", "config provider.timeout (file "},      // 10ns otherwise, under no floor
		{"collect:\n  shutdown_grace: 2.5\n", "collect.shutdown_grace"},       // a float too
		{"catalog:\n  demotion_hold: 3600\n", "catalog.demotion_hold (file "}, // floor 0
		{"catalog:\n  weights:\n    sales: -1\n", "catalog.weights.sales"},
		{"catalog:\n  weights:\n    sales: .nan\n", "catalog.weights.sales"},
		{"catalog:\n  weights:\n    sales: 1e306\n", "catalog.weights.sales"}, // scores overflow, which the schema refuses
		{"kafka:\n  topic: 'market snapshots'\n", "kafka.topic"},              // Kafka refuses the name
		{"kafka:\n  topic: market/snapshots\n", "kafka.topic"},
		// Blanks read as no settings: the OS user's database on the local socket.
		{"database:\n  url: ' '\n", "database.url"},
		{"database:\n  direct_url: ' '\n", "database.direct_url"},
		{"database:\n  read_url: '\t'\n", "database.read_url"},
		// Not a configuration at all (a key file given by mistake): the YAML library quotes
		// the value it could not read, which must not reach a log.
		{"s3cretKEY42\n", "config file"},
	} {
		_, err := Load(Options{File: writeFile(t, tc.yaml)})
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: error %v shows the password", tc.yaml, err)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to mention %q", tc.yaml, err, tc.want)
		}
		if err != nil && strings.Count(err.Error(), tc.want) > 1 && !strings.Contains(tc.want, " ") {
			t.Errorf("%q: error %v names %q twice: one check per problem", tc.yaml, err, tc.want)
		}
	}
}

// A value that cannot be read as its key's type is blamed on where it came from: the
// environment variable that set it (also with a config file given), or else the file; a bad
// DATABASE_URL is named as DATABASE_URL, not as the COLLECTOR_ variable nobody set.
// unsetEnv unsets variables for the test (restored after), so the shell's cannot decide it.
func unsetEnv(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		t.Setenv(n, "")
		os.Unsetenv(n)
	}
}

func TestAnUnreadableValueNamesItsSource(t *testing.T) {
	unsetEnv(t, "COLLECTOR_DATABASE_URL", "DATABASE_URL", "COLLECTOR_COLLECT_LEASE")
	file := writeFile(t, "collect:\n  batch_size: 10\n")
	t.Setenv("COLLECTOR_COLLECT_LEASE", "5")
	_, err := Load(Options{File: file})
	if err == nil || !strings.Contains(err.Error(), "config collect.lease (env COLLECTOR_COLLECT_LEASE)") {
		t.Fatalf("error %v, want it to name collect.lease and COLLECTOR_COLLECT_LEASE", err)
	}
	os.Unsetenv("COLLECTOR_COLLECT_LEASE")
	t.Setenv("DATABASE_URL", "postgres://app:s3cret@db:notaport/x")
	_, err = Load(Options{})
	if err == nil || !strings.Contains(err.Error(), "(env DATABASE_URL)") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v, want it to name DATABASE_URL without the password", err)
	}
}

// A bad value in the file is named by the file's line, whichever check refuses it; a key no
// setting reads is refused with its line and the setting it was probably meant to be; a value
// set by a variable is blamed on the variable even when the file sets the key too.
func TestAFileValueNamesItsLine(t *testing.T) {
	unsetEnv(t, "COLLECTOR_COLLECT_CONCURRENCY")
	for _, tc := range []struct{ yaml, want string }{
		{"collect:\n  batch_size: 10\n  concurrency: 0\n", "config collect.concurrency (FILE:3) = 0: must be between 1 and 1000"},
		{"Collect:\n  Concurrency: 0\n", "config collect.concurrency (FILE:2) = 0"},
		{"collect:\n\n  lease: soon\n", `config collect.lease (FILE:3): "soon" is not a duration`},
		{"collect:\n  batchsize: 5\n", "config collect.batchsize (FILE:2): no such setting; did you mean collect.batch_size?"},
		{"colect:\n  batch_size: 5\n", "config colect (FILE:1): no such setting; did you mean collect?"},
		{"base: &b\n  concurrency: 0\ncollect:\n  <<: *b\n", "config base (FILE:1): no such setting"},
	} {
		file := writeFile(t, tc.yaml)
		_, err := Load(Options{File: file})
		if want := strings.ReplaceAll(tc.want, "FILE", "file "+file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to say %q", tc.yaml, err, want)
		}
	}
	file := writeFile(t, "collect:\n  concurrency: 5\n")
	t.Setenv("COLLECTOR_COLLECT_CONCURRENCY", "0")
	_, err := Load(Options{File: file})
	if err == nil || !strings.Contains(err.Error(), "config collect.concurrency (env COLLECTOR_COLLECT_CONCURRENCY) = 0") || strings.Contains(err.Error(), file) {
		t.Errorf("error %v, want it to blame COLLECTOR_COLLECT_CONCURRENCY, not the file", err)
	}
}

// A topic config's names keep their dots, as the documented example writes them, and an
// unquoted value reads as written (false, not the decoder's "0"). Viper split
// "retention.ms" into retention: {ms: …} on about half the runs (it walks a map), and the load
// failed; twenty loads would all pass by chance once in a million.
func TestTopicConfigKeepsDottedNames(t *testing.T) {
	file := writeFile(t, "kafka:\n  topic_config:\n    retention.ms: 86400000\n    min.insync.replicas: '2'\n    cleanup.policy: delete\n    unclean.leader.election.enable: false\n")
	want := map[string]string{"retention.ms": "86400000", "min.insync.replicas": "2", "cleanup.policy": "delete", "unclean.leader.election.enable": "false"}
	for range 20 {
		cfg, err := Load(Options{File: file})
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		if !maps.Equal(cfg.Kafka.TopicConfig, want) {
			t.Fatalf("topic_config %v, want %v", cfg.Kafka.TopicConfig, want)
		}
	}
}

// A value of the wrong shape for a key that holds a password (a list, a map) is refused without
// quoting it: the decoder's own message would.
func TestAMisshapenSecretIsNotQuoted(t *testing.T) {
	unsetEnv(t, "DATABASE_URL", "COLLECTOR_DATABASE_URL", "COLLECTOR_KAFKA_SASL_PASSWORD")
	for _, yaml := range []string{
		"kafka:\n  sasl:\n    password: [s3cret-pw]\n",
		"database:\n  url: {postgres://app:s3cret-pw@db/x: 1}\n",
	} {
		_, err := Load(Options{File: writeFile(t, yaml)})
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "the value is not shown") {
			t.Errorf("%q: %v; want a refusal that does not show the value", yaml, err)
		}
	}
}

// Zero needs no unit, and a duration written with one still loads.
func TestDurationsWithUnitsAndZeroLoad(t *testing.T) {
	cfg, err := Load(Options{File: writeFile(t, "catalog:\n  demotion_hold: 0\nprovider:\n  timeout: 7s\n")})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Catalog.DemotionHold != 0 || cfg.Provider.Timeout != 7*time.Second {
		t.Fatalf("demotion_hold %s, timeout %s", cfg.Catalog.DemotionHold, cfg.Provider.Timeout)
	}
}

func TestMissingFileIsAnError(t *testing.T) {
	_, err := Load(Options{File: "/nonexistent/collector.yaml"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/collector.yaml") {
		t.Fatalf("error %v must name the file", err)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	const sentinel = "SENTINEL-KEY-4242"
	t.Setenv("NEOPLE_MARKET_API_KEY", sentinel)
	cfg, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Provider.MarketKey.Reveal() != sentinel {
		t.Fatal("key not loaded")
	}
	for _, s := range []string{
		fmt.Sprint(cfg.Provider.MarketKey), fmt.Sprintf("%v %+v %#v %s %q", cfg, cfg, cfg, cfg.Provider.MarketKey, cfg.Provider.MarketKey),
	} {
		if strings.Contains(s, sentinel) {
			t.Fatalf("secret leaked: %s", s)
		}
	}
}

func FuzzLoadConfig(f *testing.F) {
	f.Add("collect:\n  batch_size: 10\n")
	f.Add("provider:\n  market: {rate: 5, burst: 1}\n")
	f.Add("kafka:\n  brokers: [a:1, b:2]\n")
	f.Add(":::\n- [")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body string) {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(Options{File: p})
		if err == nil {
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("Load returned an invalid config: %v", verr)
			}
		}
	})
}

// The shipped example must always load and validate.
func TestExampleConfigLoads(t *testing.T) {
	cfg, err := Load(Options{File: "../../configs/collector.example.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Collect.BatchSize != 100 || len(cfg.Kafka.Brokers) != 1 {
		t.Fatalf("example not applied: %+v", cfg.Collect)
	}
}

// A key that cannot travel in a header (two lines in its file, a pasted control character) is
// refused at start naming where it came from, never showing it: net/http would otherwise
// refuse every request, each read as a provider failure.
func TestAKeyThatCannotBeAHeaderIsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "market.key")
	if err := os.WriteFile(file, []byte("first-line-secret\nsecond-line-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NEOPLE_ITEM_API_KEY_FILE", "")
	for _, tc := range []struct{ env, file, want string }{
		{"abc\x01def-secret", "", "NEOPLE_MARKET_API_KEY: the key holds a space or control character at byte 4"},
		{"", file, "NEOPLE_MARKET_API_KEY_FILE (" + file + "): the key holds more than one line"},
	} {
		t.Setenv("NEOPLE_MARKET_API_KEY", tc.env)
		t.Setenv("NEOPLE_MARKET_API_KEY_FILE", tc.file)
		_, err := Load(Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("key %q file %q: error %v, want %q without the key", tc.env, tc.file, err, tc.want)
		}
	}
}

// Keys may come from files (NEOPLE_*_API_KEY_FILE), as container platforms and systemd's
// LoadCredential= provide secrets; both set is an error that never shows the key.
func TestAPIKeysFromFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "market.key")
	if err := os.WriteFile(file, []byte("file-market-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NEOPLE_MARKET_API_KEY", "")
	t.Setenv("NEOPLE_MARKET_API_KEY_FILE", file)
	t.Setenv("NEOPLE_ITEM_API_KEY", "env-item-key")
	t.Setenv("NEOPLE_ITEM_API_KEY_FILE", "")
	cfg, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Provider.MarketKey.Reveal() != "file-market-key" || cfg.Provider.ItemKey.Reveal() != "env-item-key" {
		t.Fatalf("keys %q / %q", cfg.Provider.MarketKey.Reveal(), cfg.Provider.ItemKey.Reveal())
	}
	t.Setenv("NEOPLE_MARKET_API_KEY", "env-market-key")
	if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), "NEOPLE_MARKET_API_KEY and NEOPLE_MARKET_API_KEY_FILE are both set") ||
		strings.Contains(err.Error(), "market-key") && strings.Contains(err.Error(), "env-market-key") {
		t.Fatalf("both set: %v", err)
	}
	t.Setenv("NEOPLE_MARKET_API_KEY", "")
	t.Setenv("NEOPLE_MARKET_API_KEY_FILE", filepath.Join(dir, "missing"))
	if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), "NEOPLE_MARKET_API_KEY_FILE") {
		t.Fatalf("missing file: %v", err)
	}
}

// Read API tokens come from the environment or a file, split on commas and new lines; a short
// one is refused without printing it.
func TestAPITokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("first-token-0123456789\nsecond-token-0123456789, third-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(APITokensEnv, "")
	t.Setenv(APITokensEnv+"_FILE", file) // api.tokens_file
	cfg, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.API.Tokens) != 3 || cfg.API.Tokens[2].Reveal() != "third-token-0123456789" {
		t.Fatalf("%d tokens", len(cfg.API.Tokens))
	}
	t.Setenv(APITokensEnv, "other-token-0123456789")
	if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Fatalf("variable and file: %v", err)
	}
	t.Setenv(APITokensEnv+"_FILE", "")
	t.Setenv(APITokensEnv, "shorty")
	if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), APITokensEnv) || strings.Contains(err.Error(), "shorty") {
		t.Fatalf("short token: %v", err)
	}
}

// Only outbox.enabled decides whether snapshots write events: on by default whatever else is
// configured, off only when said so, and a relay beside "off" is refused naming the key.
func TestOutboxEnabledIsTheOneKey(t *testing.T) {
	cfg, err := Load(Options{})
	if err != nil || !cfg.Outbox.Enabled || len(cfg.Kafka.Brokers) != 0 {
		t.Fatalf("defaults: outbox.enabled %v with kafka.brokers %v (%v); want events written with no Kafka configured here", cfg.Outbox.Enabled, cfg.Kafka.Brokers, err)
	}
	if err := cfg.Outbox.CheckRelay(); err != nil {
		t.Fatalf("a relay refused with the defaults: %v", err)
	}
	t.Setenv("COLLECTOR_OUTBOX_ENABLED", "false")
	if cfg, err = Load(Options{}); err != nil || cfg.Outbox.Enabled {
		t.Fatalf("COLLECTOR_OUTBOX_ENABLED=false: enabled %v, %v", cfg != nil && cfg.Outbox.Enabled, err)
	}
	err = cfg.Outbox.CheckRelay()
	for _, want := range []string{"outbox.enabled", "COLLECTOR_OUTBOX_ENABLED", "false"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("relay with outbox.enabled=false: error %v does not name %s", err, want)
		}
	}
	t.Setenv("COLLECTOR_KAFKA_BROKERS", "k:9092")
	_, err = Load(Options{})
	for _, want := range []string{"outbox.enabled", "COLLECTOR_OUTBOX_ENABLED", "kafka.brokers"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("kafka.brokers beside outbox.enabled=false: error %v does not name %s", err, want)
		}
	}
}

// database.read_url takes a standby's URL or key=value string, refuses another scheme and
// database.url itself, and never shows its password: not in an error, not in config print.
func TestReadURL(t *testing.T) {
	for _, ok := range []string{"", "postgres://reader:pw@standby:5432/duecollector", "host=standby dbname=duecollector"} {
		t.Setenv("COLLECTOR_DATABASE_READ_URL", ok)
		cfg, err := Load(Options{})
		if err != nil {
			t.Fatalf("read_url %q: %v", ok, err)
		}
		if cfg.Database.ReadURL != ok {
			t.Fatalf("read_url = %q, want %q", cfg.Database.ReadURL, ok)
		}
	}
	for _, bad := range []string{"http://reader:s3cret@standby/x", "postgres://postgres:s3cret@127.0.0.1:5432/duecollector?sslmode=disable"} {
		t.Setenv("COLLECTOR_DATABASE_URL", "postgres://postgres:s3cret@127.0.0.1:5432/duecollector?sslmode=disable")
		t.Setenv("COLLECTOR_DATABASE_READ_URL", bad)
		_, err := Load(Options{})
		if err == nil || !strings.Contains(err.Error(), "database.read_url") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("read_url %q: error %v, want one naming database.read_url without the password", bad, err)
		}
	}
	t.Setenv("COLLECTOR_DATABASE_READ_URL", "postgres://reader:s3cret@standby/duecollector")
	// A password with a space, which no parse can end: config print shows the settings that
	// Load refuses too.
	t.Setenv("COLLECTOR_DATABASE_DIRECT_URL", "host=db password=open s3cret user=app")
	settings, err := Explain(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if strings.Contains(fmt.Sprint(s.Value), "s3cret") {
			t.Errorf("config print shows %s's password: %v", s.Key, s.Value)
		}
	}
}

// Every form of connection string pgx reads has its passwords masked.
func TestRedactURLMasksEveryPasswordForm(t *testing.T) {
	for _, u := range []string{
		"postgres://app:s3cret@db:5432/x?sslmode=disable",
		"postgres://app@db/x?password=s3cret",
		"postgres://app@db/x?sslmode=verify-full&sslpassword=s3cret&password=s3cret",
		"postgres://app@db/x?PASSWORD=s3cret",
		"host=db user=app password=s3cret dbname=x",
		"host=db password = 's3 cret\\' s3cret' dbname=x",
		"password=s3cret",
		"host=db password='s3 cret dbname=x", // unterminated quote
		"postgres://app:s3cret@db:54x2/x",    // unparsable
		"postgres://app@db:54x2/x?password=s3cret",
	} {
		got := RedactURL(u)
		if strings.Contains(got, "s3cret") || strings.Contains(got, "cret") {
			t.Errorf("RedactURL(%q) = %q: the password shows", u, got)
		}
		if !strings.Contains(got, "db") && !strings.HasPrefix(u, "password") {
			t.Errorf("RedactURL(%q) = %q: lost the host", u, got)
		}
	}
	for _, u := range []string{"https://api.example/?apikey=s3cret", "https://key:s3cret@api.example/df", "https://api.example/%zz?apikey=s3cret"} {
		if got := RedactHTTPURL(u); strings.Contains(got, "s3cret") || !strings.Contains(got, "api.example") {
			t.Errorf("RedactHTTPURL(%q) = %q", u, got)
		}
	}
}

// A bad bearer token is named by where it came from and its position, never by its text.
func TestABadTokenNamesItsSourceNotItself(t *testing.T) {
	unsetEnv(t, APITokensEnv, APITokensEnv+"_FILE")
	tokens := writeFile(t, "a-good-token-of-enough-length\nshort-secret\n")
	_, err := Load(Options{File: writeFile(t, "api:\n  tokens_file: "+tokens+"\n")})
	if err == nil || !strings.Contains(err.Error(), "api.tokens_file "+tokens+": token 2 of 2") || strings.Contains(err.Error(), "short-secret") {
		t.Fatalf("error %v; want the file and token 2 of 2, without the token", err)
	}
	t.Setenv(APITokensEnv, "short-secret,a-good-token-of-enough-length")
	_, err = Load(Options{})
	if err == nil || !strings.Contains(err.Error(), APITokensEnv+": token 1 of 2") || strings.Contains(err.Error(), "short-secret") {
		t.Fatalf("error %v; want %s and token 1 of 2, without the token", err, APITokensEnv)
	}
}

// Numbers and booleans are read as written or refused, naming the key, the value and what is
// wanted: never cut (8.7 → 8), wrapped (2^32+8 → 8) or answered with strconv's text; and every
// key that cannot be read is named, not only the first.
func TestNumbersAreReadAsWrittenOrRefused(t *testing.T) {
	unsetEnv(t, "COLLECTOR_DATABASE_URL", "DATABASE_URL", "COLLECTOR_COLLECT_BATCH_SIZE", "COLLECTOR_OUTBOX_ENABLED")
	for _, tc := range []struct{ yaml, want string }{
		{"database:\n  max_conns: 4294967304\n", "config database.max_conns (file"},
		{"database:\n  max_conns: 8.7\n", `8.7 is not a whole number`},
		{"collect:\n  batch_size: 99999999999999999999999\n", `is not a whole number of a size`},
		{"outbox:\n  enabled: yes\n", `"yes" is not true or false`},
		{"collect:\n  batch_size: abc\n  concurrency: xyz\n", `"xyz" is not a whole number`},
	} {
		_, err := Load(Options{File: writeFile(t, tc.yaml)})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "strconv") {
			t.Errorf("%q: %v; want an error saying %q", tc.yaml, err, tc.want)
		}
	}
	_, err := Load(Options{File: writeFile(t, "collect:\n  batch_size: abc\n  concurrency: xyz\n")})
	if err == nil || !strings.Contains(err.Error(), "collect.batch_size") || !strings.Contains(err.Error(), "collect.concurrency") {
		t.Errorf("two bad keys: %v; want both named", err)
	}
	t.Setenv("COLLECTOR_COLLECT_BATCH_SIZE", "abc")
	if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), `config collect.batch_size (env COLLECTOR_COLLECT_BATCH_SIZE): "abc" is not a whole number`) {
		t.Errorf("env abc: %v", err)
	}
	t.Setenv("COLLECTOR_COLLECT_LEASE", "10")
	if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), `config collect.lease (env COLLECTOR_COLLECT_LEASE): "10" has no unit`) {
		t.Errorf("env lease 10: %v", err)
	}
	t.Setenv("COLLECTOR_COLLECT_LEASE", "")
	t.Setenv("COLLECTOR_COLLECT_BATCH_SIZE", " 12 ")
	if cfg, err := Load(Options{}); err != nil || cfg.Collect.BatchSize != 12 {
		t.Errorf("env ' 12 ': %v", err)
	}
}

// Values that could never work are refused at start, naming the key: listen addresses, broker
// ports. A broker list's spaces and a password's trailing newline (a mounted file) are trimmed.
func TestAddressesAndSecretsAreCheckedAtStart(t *testing.T) {
	unsetEnv(t, "COLLECTOR_DATABASE_URL", "DATABASE_URL", "COLLECTOR_KAFKA_BROKERS", "COLLECTOR_DAEMON_HTTP_ADDR",
		"COLLECTOR_CONSOLE_ADDR", "COLLECTOR_KAFKA_SASL_MECHANISM", "COLLECTOR_KAFKA_SASL_USERNAME", "COLLECTOR_KAFKA_SASL_PASSWORD")
	for env, want := range map[string]string{
		"COLLECTOR_DAEMON_HTTP_ADDR": "config daemon.http_addr",
		"COLLECTOR_CONSOLE_ADDR":     "config console.addr",
	} {
		t.Setenv(env, "9090")
		if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=9090: %v; want %q", env, err, want)
		}
		t.Setenv(env, "")
	}
	for _, b := range []string{"kafka:abc", "kafka:99999", ":9092"} {
		t.Setenv("COLLECTOR_KAFKA_BROKERS", b)
		if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), "kafka.brokers") {
			t.Errorf("brokers %q: %v; want refused", b, err)
		}
	}
	t.Setenv("COLLECTOR_KAFKA_BROKERS", "kafka:9092, kafka2:9092,")
	t.Setenv("COLLECTOR_KAFKA_SASL_MECHANISM", "PLAIN")
	t.Setenv("COLLECTOR_KAFKA_SASL_USERNAME", "relay")
	t.Setenv("COLLECTOR_KAFKA_SASL_PASSWORD", "pw\n")
	cfg, err := Load(Options{})
	if err != nil || !slices.Equal(cfg.Kafka.Brokers, []string{"kafka:9092", "kafka2:9092"}) || cfg.Kafka.SASL.Password.Reveal() != "pw" {
		t.Fatalf("trimmed: %v, brokers %q", err, cfg.Kafka.Brokers)
	}
	t.Setenv("COLLECTOR_KAFKA_SASL_PASSWORD", "p\x01w")
	if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), "kafka.sasl.password") || strings.Contains(err.Error(), "p\x01w") {
		t.Errorf("a control character in the password: %v", err)
	}
}
