package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func devHelp(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := tree.NewRoot(&out, &bytes.Buffer{})
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// The development commands join the shipped ones: same groups, examples, completions and
// documented flags.
func TestDevelopmentCommandsJoinTheTree(t *testing.T) {
	root := devHelp(t, "--help")
	for _, want := range []string{"\n  demo ", "\n  sim ", "\n  collect-due ", "\n  seed:synthetic "} {
		if !strings.Contains(root, want) {
			t.Errorf("collector-dev --help lacks%s:\n%s", strings.TrimRight(want, " "), root)
		}
	}
	if strings.Contains(root, "Additional Commands:") {
		t.Errorf("a development command has no group in root help:\n%s", root)
	}
	if h := devHelp(t, "sim", "--help"); strings.Contains(h, "--database-url") {
		t.Errorf("sim --help shows --database-url, which it never uses")
	}
	if got := devHelp(t, cobra.ShellCompRequestCmd, "sim", "--market", ""); !regexp.MustCompile(`(?m)^realistic(\t|$)`).MatchString(got) {
		t.Errorf("completing sim --market: realistic not offered in\n%s", got)
	}

	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tree.NewRoot(&bytes.Buffer{}, &bytes.Buffer{}).Commands() {
		if c.Name() != "demo" && c.Name() != "sim" {
			continue
		}
		if !strings.Contains(c.Example, "collector-dev "+c.Name()) {
			t.Errorf("%s has no Example: section", c.CommandPath())
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			def := "`" + f.DefValue + "`"
			switch f.DefValue {
			case "", "false", "0", "0s":
				def = ""
			}
			row := "(?m)^\\| `" + c.Name() + "` \\| `--" + regexp.QuoteMeta(f.Name) + "[ `][^|]*\\| *" + regexp.QuoteMeta(def) + " *\\|"
			if !regexp.MustCompile(row).Match(b) {
				t.Errorf("docs/configuration.md has no row | `%s` | `--%s` … | %s |", c.Name(), f.Name, def)
			}
		})
	}
}
