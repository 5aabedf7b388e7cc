package config

import (
	"os"
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
			s.Value = RedactURL(v.GetString(k))
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

// RedactURL masks a password in a connection URL before it is printed.
func RedactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if at := strings.Index(u[i+3:], "@"); at >= 0 {
			cred := u[i+3 : i+3+at]
			if c := strings.Index(cred, ":"); c >= 0 {
				return u[:i+3] + cred[:c] + ":xxxxx" + u[i+3+at:]
			}
		}
	}
	return u
}
