// Package config turns flags, COLLECTOR_* environment variables, a YAML file and defaults
// (in that order of precedence) into one typed Config, validated once at start.
package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Config is everything the collector can be told. Each section lives in its own file with its
// defaults and validation.
type Config struct {
	Database  DatabaseConfig  `mapstructure:"database"`
	Log       LogConfig       `mapstructure:"log"`
	Provider  ProviderConfig  `mapstructure:"provider"`
	Collect   CollectConfig   `mapstructure:"collect"`
	Kafka     KafkaConfig     `mapstructure:"kafka"`
	Outbox    OutboxConfig    `mapstructure:"outbox"`
	Catalog   CatalogConfig   `mapstructure:"catalog"`
	Daemon    DaemonConfig    `mapstructure:"daemon"`
	Retention RetentionConfig `mapstructure:"retention"`
	History   HistoryConfig   `mapstructure:"history"`
	Console   ConsoleConfig   `mapstructure:"console"`
	Export    ExportConfig    `mapstructure:"export"`
	API       APIConfig       `mapstructure:"api"`
}

// Options says where to read from. Flags maps a config key to the flag that sets it; only
// flags the user actually set take precedence.
type Options struct {
	File  string
	Flags map[string]*pflag.Flag
}

// EnvPrefix prefixes every environment variable: collect.batch_size is COLLECTOR_COLLECT_BATCH_SIZE.
const EnvPrefix = "COLLECTOR"

// Load reads and validates the configuration.
func Load(opts Options) (*Config, error) {
	v, err := newViper(opts)
	if err != nil {
		return nil, err
	}
	var lines map[string]int
	if opts.File != "" {
		lines = keyLines(opts.File)
		if err := unknownKeys(opts.File, lines); err != nil {
			return nil, err
		}
	}
	// Where a key's value came from, for its errors: the variable that set it, else the file's
	// line, else the variable that could.
	where := func(key string) string {
		if env, set := envFor(key); set || !v.InConfig(key) {
			return "env " + env
		}
		return at(opts.File, lines, key)
	}
	var cfg Config
	if err := v.UnmarshalExact(&cfg, func(c *mapstructure.DecoderConfig) {
		c.DecodeHook = mapstructure.ComposeDecodeHookFunc(dottedNames, durationNeedsUnit, numbersAsWritten, c.DecodeHook)
	}); err != nil {
		return nil, decodeError(err, opts.File, where)
	}
	// Lists from the environment are split at commas only: "a:9092, b:9092" kept a space that
	// no resolver takes.
	brokers := cfg.Kafka.Brokers[:0]
	for _, b := range cfg.Kafka.Brokers {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	cfg.Kafka.Brokers = brokers
	var keyErrs []error
	// A password from a mounted file or a heredoc ends with a newline the broker would take as
	// part of it.
	cfg.Kafka.SASL.Password = Secret(strings.TrimSpace(cfg.Kafka.SASL.Password.Reveal()))
	if strings.ContainsFunc(cfg.Kafka.SASL.Password.Reveal(), unicode.IsControl) {
		keyErrs = append(keyErrs, fmt.Errorf("config kafka.sasl.password (%s): holds a control character (the value is not shown)", where("kafka.sasl.password")))
	}
	for _, k := range []struct {
		env string
		dst *Secret
	}{{"NEOPLE_MARKET_API_KEY", &cfg.Provider.MarketKey}, {"NEOPLE_ITEM_API_KEY", &cfg.Provider.ItemKey}} {
		v, err := secretEnv(k.env)
		*k.dst = v
		keyErrs = append(keyErrs, err)
	}
	keyErrs = append(keyErrs, cfg.Console.loadPassword(), cfg.API.loadTokens())
	if err := errors.Join(keyErrs...); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		nameSources(err, opts.Flags, where)
		return nil, err
	}
	return &cfg, nil
}

// newViper stacks the layers: defaults, environment, file, the flags the user set.
func newViper(opts Options) (*viper.Viper, error) {
	v := viper.New()
	setDefaults(v)
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	// Conventional names that operators already set, after our own prefixed ones.
	for key, names := range extraEnv {
		_ = v.BindEnv(append([]string{key}, names...)...)
	}

	if opts.File != "" {
		v.SetConfigFile(opts.File)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config file %s: %w", opts.File, quotedValuesHidden{err})
		}
	}
	for key, f := range opts.Flags {
		if f == nil {
			continue
		}
		if err := v.BindPFlag(key, f); err != nil {
			return nil, fmt.Errorf("bind flag --%s to %s: %w", f.Name, key, err)
		}
	}
	return v, nil
}

// quotedValuesHidden is a file's parse error with the values the YAML library quotes in it
// hidden: a file that is not a configuration (a key file given by mistake, an env file) would
// put its first bytes, or the whole of a short password, in a log line.
type quotedValuesHidden struct{ err error }

var yamlQuoted = regexp.MustCompile("`[^`]*`")

func (e quotedValuesHidden) Error() string {
	return yamlQuoted.ReplaceAllString(e.err.Error(), "`[value hidden]`")
}

func (e quotedValuesHidden) Unwrap() error { return e.err }

// dottedNames gives a map of names (kafka.topic_config) its keys as written: viper splits a key
// at its dots ("retention.ms" as retention: {ms: …}), on some runs and not others (it walks a
// map), which the decoder then refused as a map where a string belongs.
func dottedNames(_, to reflect.Type, data any) (any, error) {
	m, ok := data.(map[string]any)
	if !ok || to != reflect.TypeFor[map[string]string]() {
		return data, nil
	}
	out := map[string]any{}
	var flatten func(prefix string, m map[string]any)
	flatten = func(prefix string, m map[string]any) {
		for k, v := range m {
			if inner, ok := v.(map[string]any); ok {
				flatten(prefix+k+".", inner)
				continue
			}
			if b, ok := v.(bool); ok {
				v = strconv.FormatBool(b) // the decoder's weak typing writes "0"; Kafka reads "false"
			}
			out[prefix+k] = v
		}
	}
	flatten("", m)
	return out, nil
}

// durationNeedsUnit refuses a bare number for a duration key. YAML's "timeout: 10" is an
// integer, which would otherwise become 10ns and pass every check whose floor is 0.
func durationNeedsUnit(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() || from == to {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		if reflect.ValueOf(data).IsZero() {
			return data, nil
		}
		return nil, fmt.Errorf("%v has no unit: write a duration such as %vs or %vm", data, data, data)
	case reflect.String:
		s := strings.TrimSpace(data.(string))
		d, err := time.ParseDuration(s)
		if err != nil {
			if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
				return nil, fmt.Errorf("%q has no unit: write a duration such as %ss or %sm", s, s, s)
			}
			return nil, fmt.Errorf("%q is not a duration: write one such as 30s, 5m or 1h30m", s)
		}
		return d, nil
	}
	return data, nil
}

// listenAddr checks an address to listen on: [host]:port, the port a number (0: any free one).
func listenAddr(key, addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || !validPort(port, 0) {
		return invalid(key, addr, "must be [HOST]:PORT, the port a number from 0 to 65535, such as :9090 or 127.0.0.1:8080")
	}
	return nil
}

// validPort tells whether port is a number from least to 65535.
func validPort(port string, least int) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= least && n <= 65535
}

// numbersAsWritten reads numbers and booleans as written or refuses them, saying what is wanted:
// the decoder's weak typing would otherwise cut 8.7 to 8, wrap 4294967304 into an int's 8 and
// answer "abc" with strconv's text.
func numbersAsWritten(from, to reflect.Type, data any) (any, error) {
	if to == reflect.TypeFor[time.Duration]() || from == to {
		return data, nil
	}
	s, isString := data.(string)
	s = strings.TrimSpace(s)
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if isString {
			n, err := strconv.ParseInt(s, 10, to.Bits())
			if err != nil {
				return nil, fmt.Errorf("%q is not a whole number", s)
			}
			return n, nil
		}
		hi := math.Pow(2, float64(to.Bits()-1))
		if f, ok := asFloat(data); ok && (f != math.Trunc(f) || f < -hi || f >= hi) && !(isInt(from) && to.Bits() == 64) {
			return nil, fmt.Errorf("%v is not a whole number of a size this key holds", data)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if isString {
			n, err := strconv.ParseUint(s, 10, to.Bits())
			if err != nil {
				return nil, fmt.Errorf("%q is not a whole number of 0 or more", s)
			}
			return n, nil
		}
		if f, ok := asFloat(data); ok && (f != math.Trunc(f) || f < 0 || f >= math.Pow(2, float64(to.Bits()))) {
			return nil, fmt.Errorf("%v is not a whole number of 0 or more of a size this key holds", data)
		}
	case reflect.Float32, reflect.Float64:
		if isString {
			f, err := strconv.ParseFloat(s, to.Bits())
			if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fmt.Errorf("%q is not a finite number", s)
			}
			return f, nil
		}
	case reflect.Bool:
		if isString {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return nil, fmt.Errorf("%q is not true or false", s)
			}
			return b, nil
		}
	}
	return data, nil
}

func isInt(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return true
	}
	return false
}

// asFloat is a number of any kind as a float64 (false: not a number).
func asFloat(data any) (float64, bool) {
	v := reflect.ValueOf(data)
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(v.Uint()), true
	case reflect.Float32, reflect.Float64:
		return v.Float(), true
	}
	return 0, false
}

// decodeError names, for each key whose value could not be read as its type, where the value
// came from: the environment variable that is set, or else the file.
func decodeError(err error, file string, where func(key string) string) error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		// Each node in turn: errors.As would find the first key inside a joined error and hide
		// the others.
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, c := range j.Unwrap() {
				walk(c)
			}
			return
		}
		if de, ok := e.(*mapstructure.DecodeError); ok && de.Name() != "" {
			src := where(de.Name())
			if holdsSecret(de.Name()) {
				// The decoder's message quotes the value, which may hold a password.
				out = append(out, fmt.Errorf("config %s (%s): not a plain text value (the value is not shown: it may hold a password)", de.Name(), src))
				return
			}
			out = append(out, fmt.Errorf("config %s (%s): %w", de.Name(), src, de.Unwrap()))
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, c := range j.Unwrap() {
				walk(c)
			}
			return
		}
		if u := errors.Unwrap(e); u != nil {
			walk(u)
			return
		}
		where := "configuration"
		if file != "" {
			where = "config file " + file
		}
		out = append(out, fmt.Errorf("%s: %w", where, e))
	}
	walk(err)
	return errors.Join(out...)
}

// holdsSecret reports whether key's value may hold a password: a Secret or a connection string.
func holdsSecret(key string) bool {
	switch key {
	case "kafka.sasl.password", "database.url", "database.direct_url", "database.read_url":
		return true
	}
	return false
}

// envFor is the environment variable that sets key: the first of its names that is set, or
// its own name when none is.
func envFor(key string) (name string, set bool) {
	names := extraEnv[key]
	if names == nil {
		names = []string{EnvName(key)}
	}
	for _, n := range names {
		if _, ok := os.LookupEnv(n); ok {
			return n, true
		}
	}
	return names[0], false
}

// extraEnv lists the keys with more than one environment variable, ours first.
var extraEnv = map[string][]string{
	"database.url":      {EnvPrefix + "_DATABASE_URL", "DATABASE_URL"},
	"provider.base_url": {EnvPrefix + "_PROVIDER_BASE_URL", "NEOPLE_API_BASE_URL"},
}

// Default returns the defaults, validated; tests start from it.
func Default() *Config {
	v := viper.New()
	setDefaults(v)
	var cfg Config
	if err := v.Unmarshal(&cfg); err != nil {
		panic(err)
	}
	return &cfg
}

func setDefaults(v *viper.Viper) {
	for _, d := range []map[string]any{
		databaseDefaults, logDefaults, providerDefaults, collectDefaults,
		kafkaDefaults, outboxDefaults, catalogDefaults, daemonDefaults, retentionDefaults, historyDefaults, consoleDefaults,
		exportDefaults, apiDefaults,
	} {
		for k, val := range d {
			v.SetDefault(k, val)
		}
	}
}

// Validate checks every section and reports every bad key at once.
func (c *Config) Validate() error {
	nonFinite := finite(reflect.ValueOf(*c), "")
	errs := append([]error(nil), nonFinite...)
	for _, err := range leaves(errors.Join(
		c.Database.validate(),
		c.Log.validate(),
		c.Provider.validate(),
		c.Collect.validate(),
		c.Kafka.Validate(),
		c.Outbox.validate(c.Kafka),
		c.Catalog.validate(),
		c.Daemon.validate(),
		c.Retention.validate(c.Catalog, c.History),
		c.History.validate(),
		c.Console.validate(),
		c.Export.validate(c.Retention),
		c.API.validate(),
	)) {
		// A key finite() refused is named once: its range check would only say it again.
		var ke *KeyError
		if errors.As(err, &ke) && slices.ContainsFunc(nonFinite, func(e error) bool { return e.(*KeyError).Key == ke.Key }) {
			continue
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// leaves flattens joined errors into the errors they join.
func leaves(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		if err == nil {
			return nil
		}
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leaves(e)...)
	}
	return out
}

// finite refuses NaN and infinity in every number key, wherever it is: NaN passes every range
// check written as comparisons (a NaN rate would switch the token bucket off).
func finite(v reflect.Value, prefix string) []error {
	var errs []error
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("mapstructure"), ",")
			if name == "" || name == "-" {
				continue
			}
			if prefix != "" {
				name = prefix + "." + name
			}
			errs = append(errs, finite(v.Field(i), name)...)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			errs = append(errs, finite(v.MapIndex(k), prefix+"."+fmt.Sprint(k.Interface()))...)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			errs = append(errs, finite(v.Index(i), prefix)...)
		}
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			errs = append(errs, invalid(prefix, f, "must be a finite number"))
		}
	}
	return errs
}

// Keys lists every configuration key with its default, for the reference docs and tests.
func Keys() map[string]any {
	v := viper.New()
	setDefaults(v)
	out := map[string]any{}
	for _, k := range v.AllKeys() {
		out[k] = v.Get(k)
	}
	return out
}

// UnknownEnv returns the COLLECTOR_* variables in environ ("NAME=value" entries) that no key
// reads: a typo there would otherwise be silently ignored.
func UnknownEnv(environ []string) []string {
	known := map[string]bool{EnvPrefix + "_CONFIG": true, ConsolePasswordEnv: true, APITokensEnv: true}
	for k := range Keys() {
		known[EnvName(k)] = true
	}
	for _, names := range extraEnv {
		for _, n := range names {
			known[n] = true
		}
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix+"_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	return unknown
}

// EnvName is the environment variable for a key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// invalid builds the one error shape every section uses: the key, the value, what is allowed.
func invalid(key string, value any, allowed string) error {
	return &KeyError{Key: key, Value: fmt.Sprint(value), Allowed: allowed}
}

// Range is what a numeric key allows, stated once: the validator checks it here, and the
// package a value is handed to checks it again with the same Range, so the two cannot disagree.
// Max 0 means no upper bound.
type Range[T int | float64 | time.Duration] struct {
	Key      string
	Min, Max T
	Note     string // why, appended to the allowed values in the error
}

// Check returns the key's error when v is outside the range.
func (r Range[T]) Check(v T) error {
	allowed := "must be >= " + shortNumber(r.Min)
	if r.Max != 0 {
		allowed = "must be between " + shortNumber(r.Min) + " and " + shortNumber(r.Max)
	}
	if r.Note != "" {
		allowed += " (" + r.Note + ")"
	}
	// Written negated so that a NaN, which compares false with everything, fails.
	if !(v >= r.Min) || (r.Max != 0 && !(v <= r.Max)) {
		return invalid(r.Key, v, allowed)
	}
	return nil
}

// shortNumber prints a bound as a user writes it: 1h rather than 1h0m0s.
func shortNumber[T int | float64 | time.Duration](v T) string {
	s := fmt.Sprint(v)
	if _, ok := any(v).(time.Duration); ok {
		if strings.HasSuffix(s, "m0s") {
			s = s[:len(s)-2]
		}
		if strings.HasSuffix(s, "h0m") {
			s = s[:len(s)-2]
		}
	}
	return s
}

// KeyError is a bad value of one key. Flag is set when the value came from that flag, so the
// message names what the user typed; OtherFlag names the command's flag for the key otherwise.
// Where is the variable or the file's line the value came from.
type KeyError struct {
	Key, Value, Allowed string
	Flag, OtherFlag     string
	Where               string
}

func (e *KeyError) Error() string {
	if e.Flag != "" {
		return fmt.Sprintf("--%s %s: %s (config %s)", e.Flag, e.Value, e.Allowed, e.Key)
	}
	where := e.Where
	if where == "" {
		env, _ := envFor(e.Key)
		where = "env " + env
	}
	if e.OtherFlag != "" {
		where += ", flag --" + e.OtherFlag
	}
	return fmt.Sprintf("config %s (%s) = %s: %s", e.Key, where, e.Value, e.Allowed)
}

// nameSources names in the key errors where each value came from, and the command's flags for
// their keys: the flag the value came from, or the one that could set it.
func nameSources(err error, flags map[string]*pflag.Flag, where func(key string) string) {
	switch e := err.(type) {
	case *KeyError:
		e.Where = where(e.Key)
		if f := flags[e.Key]; f != nil && f.Changed {
			e.Flag = f.Name
		} else if f != nil {
			e.OtherFlag = f.Name
		}
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			nameSources(inner, flags, where)
		}
	case interface{ Unwrap() error }:
		nameSources(e.Unwrap(), flags, where)
	}
}

// Secret is an API key. It prints as [redacted] through every fmt verb (Format, which fmt
// prefers to String and GoString), zap (String) and JSON (MarshalText).
type Secret string

func (Secret) String() string               { return "[redacted]" }
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("[redacted]")) }

// Reveal returns the key itself, for the one place that sends it.
func (s Secret) Reveal() string { return string(s) }

// Empty reports whether no key was given.
func (s Secret) Empty() bool { return s == "" }

// secretEnv reads a secret from the variable env, or from the file named by env_FILE (as
// container platforms mount secrets, and systemd's LoadCredential= places them). Setting both
// is an error; the file's surrounding whitespace is trimmed. Errors never include the value.
func secretEnv(env string) (Secret, error) {
	val, file := strings.TrimSpace(os.Getenv(env)), os.Getenv(env+"_FILE")
	if file == "" {
		return Secret(val), headerSafe(env, val)
	}
	if val != "" {
		return "", fmt.Errorf("%s and %s_FILE are both set: set one", env, env)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: %w", env, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s_FILE: %s is empty", env, file)
	}
	return Secret(v), headerSafe(env+"_FILE ("+file+")", v)
}

// headerSafe refuses a key that cannot travel in a header: net/http would refuse every
// request, and each refusal would read as a provider failure. The error never shows the key.
func headerSafe(where, key string) error {
	if i := strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f || r > '~' }); i >= 0 {
		what := "a space or control character"
		if key[i] == '\n' {
			what = "more than one line"
		}
		return fmt.Errorf("%s: the key holds %s at byte %d; a key is one word of printable ASCII", where, what, i+1)
	}
	return nil
}
