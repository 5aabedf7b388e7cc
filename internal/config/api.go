package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// APIConfig configures the read API (internal/api) served under /api/v1/ wherever the console
// is: by `collector run` on daemon.http_addr and by `collector console`.
type APIConfig struct {
	Enabled bool `mapstructure:"enabled"`
	// CORSOrigins are the browser origins allowed to call the API from their pages
	// ("https://prices.example.org"), or "*" for any; empty = none (same-origin only).
	CORSOrigins []string `mapstructure:"cors_origins"`
	// Rate is the requests per second one client may make (its burst is twice that); 0 = no
	// limit. A client is its bearer token, or its address without tokens.
	Rate float64 `mapstructure:"rate"`
	// TokensFile names a file of bearer tokens (its variable is COLLECTOR_API_TOKENS_FILE);
	// COLLECTOR_API_TOKENS holds them instead. Several are separated by commas or new lines.
	// With any, every request needs "Authorization: Bearer <token>".
	TokensFile string   `mapstructure:"tokens_file"`
	Tokens     []Secret `mapstructure:"-"`
}

// APITokensEnv holds the read API's bearer tokens.
const APITokensEnv = EnvPrefix + "_API_TOKENS"

var apiDefaults = map[string]any{
	"api.enabled":      true,
	"api.cors_origins": []string{},
	"api.rate":         25.0,
	"api.tokens_file":  "",
}

// loadTokens reads the tokens from the environment or api.tokens_file, never from the YAML
// file itself (so they stay out of committed configs). Errors never include a token.
func (c *APIConfig) loadTokens() error {
	all := strings.TrimSpace(os.Getenv(APITokensEnv))
	if c.TokensFile != "" {
		if all != "" {
			return fmt.Errorf("%s and api.tokens_file (%s_FILE) are both set: set one", APITokensEnv, APITokensEnv)
		}
		b, err := os.ReadFile(c.TokensFile)
		if err != nil {
			return fmt.Errorf("api.tokens_file: %w", err)
		}
		if all = strings.TrimSpace(string(b)); all == "" {
			return fmt.Errorf("api.tokens_file: %s is empty", c.TokensFile)
		}
	}
	c.Tokens = nil
	for _, t := range strings.FieldsFunc(all, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if t = strings.TrimSpace(t); t != "" {
			c.Tokens = append(c.Tokens, Secret(t))
		}
	}
	return nil
}

func (c APIConfig) validate() error {
	var errs []error
	if c.Rate < 0 || c.Rate > 100000 {
		errs = append(errs, invalid("api.rate", c.Rate, "must be between 0 (no limit) and 100000 requests per second"))
	}
	for _, o := range c.CORSOrigins {
		if err := checkOrigin(o); err != nil {
			errs = append(errs, invalid("api.cors_origins", o, err.Error()))
		}
	}
	from := APITokensEnv
	if c.TokensFile != "" {
		from = "api.tokens_file " + c.TokensFile
	}
	for i, t := range c.Tokens {
		if len(t) < 16 || strings.ContainsAny(t.Reveal(), " \t") {
			// Named by position: the token itself is a secret.
			errs = append(errs, fmt.Errorf("%s: token %d of %d is too short or holds a space; each token must be at least 16 characters without spaces", from, i+1, len(c.Tokens)))
		}
	}
	return errors.Join(errs...)
}

// checkOrigin accepts "*" or a browser origin: a scheme and host, a port at most, nothing else.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
		return errors.New(`must be "*" or an origin such as https://prices.example.org (a scheme and host, no path)`)
	}
	// Compared as written with the Origin header, which a browser sends with the scheme and
	// host in lower case and without the scheme's default port: written otherwise, an origin
	// would never match, and the page would meet CORS failures nobody logs.
	canonical := strings.ToLower(u.Scheme + "://" + u.Host)
	if p := u.Port(); (u.Scheme == "https" && p == "443") || (u.Scheme == "http" && p == "80") {
		canonical = strings.TrimSuffix(canonical, ":"+p)
	}
	if canonical != o {
		return fmt.Errorf("write it as a browser sends it in Origin: %s", canonical)
	}
	return nil
}
