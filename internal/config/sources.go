package config

import (
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
)

// Setting is one key's effective value and the layer it came from.
type Setting struct {
	Key    string
	Value  any
	Source string // flag --name, env NAME, file, default
}

// secretKeys print as [redacted] whatever their value.
var secretKeys = map[string]bool{"kafka.sasl.password": true}

// Explain reads the layers as Load does and says, for every key, which one set its value.
// Secrets are redacted and a password in a database URL is masked.
func Explain(opts Options) ([]Setting, error) {
	v, err := newViper(opts)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(Keys()))
	for k := range Keys() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Setting, 0, len(keys))
	for _, k := range keys {
		s := Setting{Key: k, Value: v.Get(k), Source: "default"}
		envs := append([]string{EnvName(k)}, extraEnv[k]...)
		switch f := opts.Flags[k]; {
		case f != nil && f.Changed:
			s.Source = "flag --" + f.Name
		case firstEnv(envs) != "":
			s.Source = "env " + firstEnv(envs)
		case v.InConfig(k):
			s.Source = "file " + opts.File
		}
		switch {
		case secretKeys[k] && s.Value != "":
			s.Value = "[redacted]"
		case k == "database.url" || k == "database.direct_url" || k == "database.read_url":
			// As its errors show it: a key=value string's password runs to the next key=, so
			// one with a space in it is masked whole.
			s.Value = redactUnparsable(v.GetString(k))
		case k == "provider.base_url":
			s.Value = RedactHTTPURL(v.GetString(k))
		}
		out = append(out, s)
	}
	return out, nil
}

// firstEnv is the first of the variables that is set and not empty (empty counts as unset).
func firstEnv(names []string) string {
	for _, n := range names {
		if strings.TrimSpace(os.Getenv(n)) != "" {
			return n
		}
	}
	return ""
}

// RedactURL masks the passwords in a connection string before it is printed, in each form pgx
// reads: the user information of a URL, its password and sslpassword query parameters, and the
// same keys of a key=value string.
func RedactURL(u string) string {
	if strings.Contains(u, "://") {
		if p, err := url.Parse(u); err == nil {
			if _, set := p.User.Password(); set {
				p.User = url.UserPassword(p.User.Username(), "xxxxx")
			}
			if q := p.Query(); len(q) > 0 {
				for k := range q {
					if secretParam(k) {
						q.Set(k, "xxxxx")
					}
				}
				p.RawQuery = q.Encode()
			}
			return p.String()
		}
		// Unparsable: mask what looks like user:password@ and any password parameter.
		u = urlUserPassword.ReplaceAllString(u, "${1}:xxxxx@")
	}
	return dsnPassword.ReplaceAllString(u, "${1}xxxxx")
}

var (
	urlUserPassword = regexp.MustCompile(`(://[^:/@]*):[^@]*@`)
	// A key=value value is a quoted string (with \' escapes; unterminated, it runs to the
	// end) or runs to a space; in a URL's query it runs to the next &.
	dsnPassword = regexp.MustCompile(`(?i)((?:^|[\s?&])(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|'.*$|[^\s&]*)`)
)

// redactUnparsable masks a key=value connection string that does not parse: which word ends a
// password is not known there (pgx's own reason may be a space in it), so each password runs to
// the next key=.
func redactUnparsable(s string) string {
	if strings.Contains(s, "://") {
		return RedactURL(s)
	}
	loc := passwordKey.FindStringIndex(s)
	if loc == nil {
		return s
	}
	rest := s[loc[1]:]
	end := len(rest)
	if m := nextKey.FindStringIndex(rest); m != nil {
		end = m[0]
	}
	return s[:loc[1]] + "xxxxx" + redactUnparsable(rest[end:])
}

var (
	passwordKey = regexp.MustCompile(`(?i)(?:^|\s)(?:ssl)?password\s*=\s*`)
	nextKey     = regexp.MustCompile(`\s+[A-Za-z_]+\s*=`)
)

func secretParam(k string) bool {
	k = strings.ToLower(k)
	return k == "password" || k == "sslpassword"
}

// RedactHTTPURL prints a URL without its user information and query, where a key may travel.
func RedactHTTPURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		if i := strings.IndexAny(u, "?@"); i >= 0 {
			return u[:i] + "[redacted]"
		}
		return u
	}
	if p.User != nil {
		p.User = url.User("xxxxx")
	}
	if p.RawQuery != "" {
		p.RawQuery = "[redacted]"
	}
	return p.String()
}
