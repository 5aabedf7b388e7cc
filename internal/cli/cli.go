package cli

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/duecollector/duecollector/internal/config"
)

// Exit codes, documented in README.md (Commands).
const (
	exitRuntime = 1 // the command ran and failed
	exitUsage   = 2 // unknown command or flag, wrong arguments: nothing was done
)

// usageError is a mistake in the command line; main exits 2 and points to --help.
type usageError struct {
	cmd string // "collector collect"
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode maps an error from Execute to the process exit code.
func exitCode(err error) int {
	var ee exitError
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue), isCobraUsage(err):
		return exitUsage
	}
	return exitRuntime
}

// isCobraUsage recognises the errors cobra raises before any command runs.
func isCobraUsage(err error) bool {
	return strings.HasPrefix(err.Error(), "unknown command ") || strings.HasPrefix(err.Error(), "required flag(s) ")
}

// usageHint is the line printed after a usage error.
func usageHint(err error) string {
	for _, dev := range []string{"demo", "sim"} {
		// collector-dev has them, so only the shipped binary can miss them.
		if strings.HasPrefix(err.Error(), fmt.Sprintf("unknown command %q ", dev)) {
			return fmt.Sprintf("%s is a development command, in collector-dev (make build-dev): go run ./cmd/collector-dev %s", dev, dev)
		}
	}
	var ue usageError
	if errors.As(err, &ue) {
		return fmt.Sprintf("Run '%s --help' for usage.", ue.cmd)
	}
	return "Run 'collector --help' for usage."
}

// Command groups in root help, so related commands read together (relay-outbox next to outbox).
var commandGroups = []struct{ id, title string }{
	{"start", "Getting started:"},
	{"collect", "Collecting:"},
	{"outbox", "Publishing to Kafka:"},
	{"catalog", "Tracked items:"},
	{"ops", "Operating:"},
}

var groupOf = map[string]string{
	"demo": "start", "console": "start", "migrate": "start", "sim": "start", "version": "start", "config": "start",
	"collect-due": "collect", "collect": "collect", "run": "collect", "provider": "collect", "status": "collect",
	"relay-outbox": "outbox", "outbox": "outbox",
	"import-items": "catalog", "items": "catalog", "touch": "catalog", "recalculate-popularity": "catalog",
	"seed:real": "catalog", "seed:synthetic": "catalog", "purge:synthetic": "catalog", "plan": "catalog",
	"prune": "ops", "partitions": "ops", "healthcheck": "ops", "packing": "ops", "api-check": "ops",
	"history": "catalog", "export": "catalog",
}

// finishTree applies what every command shares: groups, usage errors that exit 2, examples,
// defaults of config-bound flags written the way pflag writes the others, completions.
func (a *app) finishTree(root *cobra.Command) {
	for _, g := range commandGroups {
		root.AddGroup(&cobra.Group{ID: g.id, Title: g.title})
	}
	root.SetHelpCommandGroupID("start")
	root.SetCompletionCommandGroupID("ops")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{c.CommandPath(), err} })
	for _, c := range root.Commands() {
		if id, ok := groupOf[c.Name()]; ok {
			c.GroupID = id
		}
	}
	walk(root, func(c *cobra.Command) {
		if c.Example == "" {
			c.Example = examples[sharedPath(c)]
		}
		if c.HasSubCommands() && c.Args == nil && (c.Run != nil || c.RunE != nil) {
			// cobra would hand an unknown subcommand word to the group's own run as an argument.
			c.Args = func(c *cobra.Command, args []string) error {
				if len(args) > 0 {
					return fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath())
				}
				return nil
			}
		}
		if c.Args != nil {
			check := c.Args
			c.Args = func(c *cobra.Command, args []string) error {
				if err := check(c, args); err != nil {
					return usageError{c.CommandPath(), err}
				}
				return nil
			}
		}
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			// A group alone prints its help; a group with an unknown word is a usage error.
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(c *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageError{c.CommandPath(), fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath())}
				}
				return c.Help()
			}
		}
	})
	for _, c := range root.Commands() {
		switch c.Name() {
		case "sim":
			hideFlags(c, "database-url")
		case "version":
			hideFlags(c, "database-url", "config", "log-level", "log-format")
		}
	}
	keys := config.Keys()
	for key, f := range a.flagKeys {
		f.DefValue = flagDefault(keys[key])
	}
	a.registerCompletions(root)
}

// flagDefault writes a config default as pflag writes a flag's: empty when there is none.
func flagDefault(v any) string {
	rv := reflect.ValueOf(v)
	if v == nil || v == "" || (rv.Kind() == reflect.Slice && rv.Len() == 0) {
		return ""
	}
	return fmt.Sprint(v)
}

// sharedPath is c's path under the shipped binary's name, the same in every tree that runs it.
func sharedPath(c *cobra.Command) string {
	return "collector" + strings.TrimPrefix(c.CommandPath(), c.Root().Name())
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// hideFlags keeps flags a command never uses out of its help (sim and version need no database).
func hideFlags(c *cobra.Command, names ...string) {
	parentHelp := c.HelpFunc()
	c.SetHelpFunc(func(c *cobra.Command, args []string) {
		var hidden []*pflag.Flag
		for _, n := range names {
			if f := c.Root().PersistentFlags().Lookup(n); f != nil && !f.Hidden {
				f.Hidden = true
				hidden = append(hidden, f)
			}
		}
		defer func() {
			for _, f := range hidden {
				f.Hidden = false
			}
		}()
		parentHelp(c, args)
	})
}
