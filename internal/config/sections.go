package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap/zapcore"

	"github.com/duecollector/duecollector/internal/tiers"
)

// DatabaseConfig: the pool is the collector's whole footprint on a shared database.
type DatabaseConfig struct {
	URL      string `mapstructure:"url"`
	MaxConns int32  `mapstructure:"max_conns"`
	// DirectURL reaches PostgreSQL itself, bypassing a transaction-pooling PgBouncer, for what
	// needs a session: migrations (advisory lock) and LISTEN. "" = URL.
	DirectURL string `mapstructure:"direct_url"`
	// QueryExecMode is pgx's default_query_exec_mode; simple_protocol works behind PgBouncer in
	// transaction mode. "" = pgx's default (cache_statement) or what the URL says.
	QueryExecMode string `mapstructure:"query_exec_mode"`
	// ReadURL is a streaming replica (a hot standby of URL's primary) for the reads of the
	// console, the API and `collector history`; "" = they read the primary. Collection never
	// uses it.
	ReadURL string `mapstructure:"read_url"`
}

// QueryExecModes are the values database.query_exec_mode allows.
var QueryExecModes = []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}

var databaseDefaults = map[string]any{
	"database.url":             "postgres://postgres@127.0.0.1:5432/duecollector?sslmode=disable",
	"database.max_conns":       8,
	"database.direct_url":      "",
	"database.query_exec_mode": "",
	"database.read_url":        "",
}

func (c DatabaseConfig) validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, invalid("database.url", `""`, "required (DATABASE_URL also sets it)"))
	}
	for _, u := range []struct{ key, value string }{{"database.url", c.URL}, {"database.direct_url", c.DirectURL}, {"database.read_url", c.ReadURL}} {
		if u.value != "" && strings.TrimSpace(u.value) == "" {
			// pgx reads blanks as "no settings": the local socket's database named for the
			// OS user, where a migration would have built the schema.
			errs = append(errs, invalid(u.key, fmt.Sprintf("%q", u.value), "blank: give a postgres:// URL or key=value connection string, or leave it unset"))
			continue
		}
		if err := parsable(u.key, u.value); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxConns < 2 || c.MaxConns > 200 {
		errs = append(errs, invalid("database.max_conns", c.MaxConns, "must be between 2 and 200"))
	}
	if c.QueryExecMode != "" && !slices.Contains(QueryExecModes, c.QueryExecMode) {
		errs = append(errs, invalid("database.query_exec_mode", c.QueryExecMode, "allowed "+strings.Join(QueryExecModes, ", ")))
	}
	if err := c.validateReadURL(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// parsable refuses a connection string pgx cannot read, which no retry would ever connect
// with; neither the value nor pgx's reason shows its password.
func parsable(key, value string) error {
	if value == "" {
		return nil
	}
	// pgxpool's parser, not pgconn's: the pool_* and statement cache parameters are read
	// only there, and one that does not parse would otherwise fail every connection attempt.
	if _, err := pgxpool.ParseConfig(value); err != nil {
		return invalid(key, redactUnparsable(value), "a postgres:// URL or key=value connection string: "+ParseReason(err))
	}
	return nil
}

// ParseReason is pgx's reason a connection string does not parse, without the string: pgx
// masks only the passwords it recognises (not `password = x`, spaced), so the string is cut off,
// and every quoted word of the reason masked (`missing "=" after "sesame"` quotes a word of a
// password with a space; a URL's parse error quotes the URL).
func ParseReason(err error) string {
	s := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		s = "cannot parse"
		if i := strings.LastIndex(err.Error(), "`: "); i >= 0 {
			s = err.Error()[i+3:]
		}
	}
	return RedactURL(quoted.ReplaceAllStringFunc(s, func(q string) string {
		if q == `"="` {
			return q
		}
		return `"…"`
	}))
}

// quoted is a Go-quoted string (%q) in an error.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// validateReadURL checks what can be checked without connecting; the value in an error has
// its password masked.
func (c DatabaseConfig) validateReadURL() error {
	if c.ReadURL == "" {
		return nil
	}
	shown := RedactURL(c.ReadURL)
	if strings.Contains(c.ReadURL, "://") {
		u, err := url.Parse(c.ReadURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return invalid("database.read_url", shown, `a postgres:// URL or key=value connection string of a standby; "" reads from the primary`)
		}
	}
	if c.ReadURL == c.URL {
		return invalid("database.read_url", shown, `a standby of database.url, not database.url itself; "" reads from the primary`)
	}
	return nil
}

// LogConfig selects zap's level and encoder.
type LogConfig struct {
	Level  string `mapstructure:"level"`
	Format string `mapstructure:"format"`
}

var logDefaults = map[string]any{
	"log.level":  "info",
	"log.format": "auto",
}

func (c LogConfig) validate() error {
	var errs []error
	if _, err := zapcore.ParseLevel(c.Level); err != nil {
		errs = append(errs, invalid("log.level", c.Level, "allowed: debug, info, warn, error"))
	}
	if c.Format != "json" && c.Format != "console" && c.Format != "auto" {
		errs = append(errs, invalid("log.format", c.Format, "allowed: json, console, auto"))
	}
	return errors.Join(errs...)
}

// WorkloadLimits is one API key's budget.
type WorkloadLimits struct {
	Rate      float64 `mapstructure:"rate"`       // requests per second
	Burst     int     `mapstructure:"burst"`      // token bucket depth
	PerMinute int     `mapstructure:"per_minute"` // requests per rolling minute
}

func (w WorkloadLimits) validate(prefix string) error {
	var errs []error
	if w.Rate <= 0 || w.Rate > 100000 {
		errs = append(errs, invalid(prefix+".rate", w.Rate, "requests per second, must be > 0 and <= 100000"))
	}
	if w.Burst < 1 || w.Burst > 100000 {
		errs = append(errs, invalid(prefix+".burst", w.Burst, "must be between 1 and 100000"))
	}
	if w.PerMinute < 1 {
		errs = append(errs, invalid(prefix+".per_minute", w.PerMinute, "must be >= 1"))
	}
	return errors.Join(errs...)
}

// ProviderConfig configures the Neople client. Keys come only from NEOPLE_MARKET_API_KEY and
// NEOPLE_ITEM_API_KEY, never from a file or a flag, so they do not end up in shell history or
// in a committed config.
type ProviderConfig struct {
	Name         string         `mapstructure:"name"`
	BaseURL      string         `mapstructure:"base_url"`
	Timeout      time.Duration  `mapstructure:"timeout"`
	KeyIn        string         `mapstructure:"key_in"`
	AuctionLimit int            `mapstructure:"auction_limit"`
	SoldLimit    int            `mapstructure:"sold_limit"`
	Market       WorkloadLimits `mapstructure:"market"`
	Item         WorkloadLimits `mapstructure:"item"`

	MarketKey Secret `mapstructure:"-"`
	ItemKey   Secret `mapstructure:"-"`
}

var providerDefaults = map[string]any{
	"provider.name":              "neople",
	"provider.base_url":          "https://" + NeopleHost,
	"provider.timeout":           "10s",
	"provider.key_in":            "header",
	"provider.auction_limit":     400,
	"provider.sold_limit":        100,
	"provider.market.rate":       500.0,
	"provider.market.burst":      50,
	"provider.market.per_minute": 30000,
	"provider.item.rate":         500.0,
	"provider.item.burst":        50,
	"provider.item.per_minute":   30000,
}

// NeopleHost is the real API's host.
const NeopleHost = "api.neople.co.kr"

func (c ProviderConfig) validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, invalid("provider.name", `""`, "required"))
	}
	if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		errs = append(errs, invalid("provider.base_url", RedactHTTPURL(c.BaseURL), "must be an http(s) URL without a query, such as https://api.neople.co.kr (env NEOPLE_API_BASE_URL)"))
	} else if u.Scheme == "http" && strings.EqualFold(strings.TrimSuffix(u.Hostname(), "."), NeopleHost) {
		// Plain http to the real API sends the keys across the internet in clear text before any
		// redirect could say so; http stays for the simulator and for proxies on the operator's own network.
		errs = append(errs, invalid("provider.base_url", RedactHTTPURL(c.BaseURL), "the Neople API must be reached over https (the API keys would travel in clear text): use https://"+NeopleHost))
	}
	if c.Timeout <= 0 || c.Timeout > 5*time.Minute {
		errs = append(errs, invalid("provider.timeout", c.Timeout, "must be > 0 and <= 5m"))
	}
	if c.KeyIn != "header" && c.KeyIn != "query" {
		errs = append(errs, invalid("provider.key_in", c.KeyIn, "allowed: header, query"))
	}
	if c.AuctionLimit < 1 || c.AuctionLimit > 400 {
		errs = append(errs, invalid("provider.auction_limit", c.AuctionLimit, "must be between 1 and 400 (the API's cap)"))
	}
	if c.SoldLimit < 1 || c.SoldLimit > 100 {
		errs = append(errs, invalid("provider.sold_limit", c.SoldLimit, "must be between 1 and 100 (the API's cap)"))
	}
	errs = append(errs, c.Market.validate("provider.market"), c.Item.validate("provider.item"))
	return errors.Join(errs...)
}

// CollectConfig sizes one collect-due run.
type CollectConfig struct {
	BatchSize   int           `mapstructure:"batch_size"`
	Lease       time.Duration `mapstructure:"lease"`
	Concurrency int           `mapstructure:"concurrency"`
	MaxBatches  int           `mapstructure:"max_batches"` // 0 = until nothing (that was due at the start) is left
	// ShutdownGrace: after SIGTERM/SIGINT a one-shot's calls in flight get this long to finish.
	ShutdownGrace time.Duration `mapstructure:"shutdown_grace"`
	// Packing (itemIds): small items (internal/packing) share calls of up to PackSize ids (1 = off).
	PackSize int `mapstructure:"pack_size"`
}

var collectDefaults = map[string]any{
	"collect.batch_size":     100,
	"collect.lease":          "2m",
	"collect.concurrency":    16,
	"collect.max_batches":    0,
	"collect.shutdown_grace": "20s",
	"collect.pack_size":      10,
}

// The ranges of the collect.* keys the dispatcher is handed; it checks them again with these.
var (
	CollectBatchSize   = Range[int]{Key: "collect.batch_size", Min: 1, Max: 10000}
	CollectLease       = Range[time.Duration]{Key: "collect.lease", Min: time.Second, Max: time.Hour}
	CollectConcurrency = Range[int]{Key: "collect.concurrency", Min: 1, Max: 1000}
	CollectMaxBatches  = Range[int]{Key: "collect.max_batches", Min: 0, Note: "0 = until what was due at the start is collected"}
	CollectPackSize    = Range[int]{Key: "collect.pack_size", Min: 1, Max: 10, Note: "1 = packing off; 10 is the API's itemIds cap"}
)

func (c CollectConfig) validate() error {
	errs := []error{
		CollectBatchSize.Check(c.BatchSize),
		CollectLease.Check(c.Lease),
		CollectConcurrency.Check(c.Concurrency),
		CollectMaxBatches.Check(c.MaxBatches),
		CollectPackSize.Check(c.PackSize),
	}
	if c.ShutdownGrace < 0 || c.ShutdownGrace > 10*time.Minute {
		errs = append(errs, invalid("collect.shutdown_grace", c.ShutdownGrace, "must be between 0 and 10m"))
	}
	return errors.Join(errs...)
}

// tierKey validates a tier name held in a config key.
func tierKey(key, value string) error {
	if _, err := tiers.Parse(value); err != nil {
		return invalid(key, value, "allowed: "+tiers.Names())
	}
	return nil
}
