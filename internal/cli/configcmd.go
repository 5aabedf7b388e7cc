package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider"
)

func newConfigCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Show the effective configuration"}
	printCmd := &cobra.Command{
		Use:   "print",
		Short: "Print every key's effective value and where it came from (flag, env, file, default), secrets redacted",
		Long: `print resolves the configuration exactly as every other command does (flag > COLLECTOR_*
environment > config file > default) and prints each key with its value and the layer that set
it. API keys and passwords are shown as [redacted]; it never touches the database. A bad value
is still printed, and the command then fails naming it, as any other command would.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			opts := config.Options{File: a.configPath(), Flags: a.flagKeys}
			settings, err := config.Explain(opts)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "KEY\tVALUE\tSOURCE")
			for _, s := range settings {
				fmt.Fprintf(w, "%s\t%v\t%s\n", s.Key, s.Value, s.Source)
			}
			for _, env := range []string{provider.WorkloadMarket.KeyEnv(), provider.WorkloadItem.KeyEnv(), config.ConsolePasswordEnv, config.APITokensEnv} {
				val, src := "(not set)", "-"
				switch {
				case getenv(env) != "":
					val, src = "[redacted]", "env "+env
				case getenv(env+"_FILE") != "":
					val, src = "[redacted]", "file "+getenv(env+"_FILE")+" (env "+env+"_FILE)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", env, val, src)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			_, err = config.Load(opts)
			return err
		},
	}
	cmd.AddCommand(printCmd)
	return cmd
}
