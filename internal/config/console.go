package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// ConsoleConfig configures the operator console (internal/console), served by `collector run`
// on daemon.http_addr and by `collector console`.
type ConsoleConfig struct {
	// Enabled mounts the console at / beside /metrics on daemon.http_addr.
	Enabled bool `mapstructure:"enabled"`
	// Addr is where `collector console` listens.
	Addr string `mapstructure:"addr"`
	// User is the login name for actions; the password is COLLECTOR_CONSOLE_PASSWORD or the
	// file console.password_file names. Without a password the console is read-only.
	User         string `mapstructure:"user"`
	PasswordFile string `mapstructure:"password_file"`
	Password     Secret `mapstructure:"-"`
	// Session is how long a login lasts.
	Session time.Duration `mapstructure:"session"`
}

var consoleDefaults = map[string]any{
	"console.enabled":       true,
	"console.addr":          "127.0.0.1:8080",
	"console.user":          "admin",
	"console.password_file": "",
	"console.session":       "12h",
}

// ConsolePasswordEnv holds the console password; console.password_file (its environment
// variable COLLECTOR_CONSOLE_PASSWORD_FILE) names a file holding it instead.
const ConsolePasswordEnv = EnvPrefix + "_CONSOLE_PASSWORD"

// loadPassword reads the password from the environment or the file, never from the YAML file
// (so it stays out of committed configs). Errors never include the value.
func (c *ConsoleConfig) loadPassword() error {
	val := strings.TrimSpace(os.Getenv(ConsolePasswordEnv))
	if c.PasswordFile == "" {
		c.Password = Secret(val)
		return nil
	}
	if val != "" {
		return fmt.Errorf("%s and console.password_file (%s_FILE) are both set: set one", ConsolePasswordEnv, ConsolePasswordEnv)
	}
	b, err := os.ReadFile(c.PasswordFile)
	if err != nil {
		return fmt.Errorf("console.password_file: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return fmt.Errorf("console.password_file: %s is empty", c.PasswordFile)
	}
	c.Password = Secret(v)
	return nil
}

func (c ConsoleConfig) validate() error {
	var errs []error
	if err := listenAddr("console.addr", c.Addr); err != nil {
		errs = append(errs, err)
	}
	if c.Session < time.Minute || c.Session > 30*24*time.Hour {
		errs = append(errs, invalid("console.session", c.Session, "must be between 1m and 720h"))
	}
	if !c.Password.Empty() && strings.TrimSpace(c.User) == "" {
		errs = append(errs, invalid("console.user", `""`, "must be set when a console password is"))
	}
	return errors.Join(errs...)
}
