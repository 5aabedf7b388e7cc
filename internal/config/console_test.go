package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The console password comes from COLLECTOR_CONSOLE_PASSWORD or the file console.password_file
// names (COLLECTOR_CONSOLE_PASSWORD_FILE); both set is an error, and no error or print shows it.
func TestConsolePasswordFromEnvOrFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "console.pw")
	if err := os.WriteFile(file, []byte("file-console-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv(ConsolePasswordEnv, "")
	t.Setenv(ConsolePasswordEnv+"_FILE", "")
	cfg, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Console.Password.Empty() {
		t.Fatal("a password with none configured")
	}
	t.Setenv(ConsolePasswordEnv, "env-console-pw")
	if cfg, err = Load(Options{}); err != nil || cfg.Console.Password.Reveal() != "env-console-pw" {
		t.Fatalf("from the environment: %v", err)
	}
	t.Setenv(ConsolePasswordEnv, "")
	t.Setenv(ConsolePasswordEnv+"_FILE", file)
	if cfg, err = Load(Options{}); err != nil || cfg.Console.Password.Reveal() != "file-console-pw" {
		t.Fatalf("from the file: %v", err)
	}
	if s := fmt.Sprintf("%v %+v", cfg.Console, cfg.Console); strings.Contains(s, "console-pw") {
		t.Errorf("the console config prints its password: %s", s)
	}
	t.Setenv(ConsolePasswordEnv, "env-console-pw")
	if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), "both set") || strings.Contains(err.Error(), "console-pw") {
		t.Fatalf("both set: %v", err)
	}
	t.Setenv(ConsolePasswordEnv, "")
	t.Setenv(ConsolePasswordEnv+"_FILE", filepath.Join(dir, "missing"))
	if _, err := Load(Options{}); err == nil || !strings.Contains(err.Error(), "console.password_file") {
		t.Fatalf("missing file: %v", err)
	}
	if u := UnknownEnv([]string{ConsolePasswordEnv + "=x", ConsolePasswordEnv + "_FILE=y"}); len(u) != 0 {
		t.Errorf("console password variables reported unknown: %v", u)
	}
}
