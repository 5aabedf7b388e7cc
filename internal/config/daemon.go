package config

// DaemonConfig configures `collector run`.
type DaemonConfig struct {
	HTTPAddr string `mapstructure:"http_addr"`
}

var daemonDefaults = map[string]any{
	"daemon.http_addr": ":9090",
}

func (c DaemonConfig) validate() error { return nil }
