package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/tiers"
)

// examples is each command's Example: section (a command may also set its own). Kept in one
// place so the invocations read alike; TestEveryCommandHasAnExample keeps it complete.
var examples = map[string]string{
	"collector export": `  collector export --day 2026-12-03 --out exports/2026-12-03
  collector export --day 2026-12-03 --out /tmp/day --format csv
  collector export --day "$(date -u +%F)" --out /tmp/today --partial   # a day in progress`,
	"collector history": `  collector items --limit 5                        # find an ITEM_ID
  collector history ITEM_ID --interval 1h --since 7d
  collector history ITEM_ID --interval raw --since 24h -o csv`,
	"collector partitions": `  collector partitions            # from cron, daily: partitions a week ahead, drops past retention.*
  COLLECTOR_RETENTION_SNAPSHOTS=2160h collector partitions`,
	"collector": `  collector-dev demo              # start here: the whole flow on a fresh machine (make demo)
  collector migrate up && collector import-items && collector run`,
	"collector console": `  collector console                                        # read-only, on http://127.0.0.1:8080/
  COLLECTOR_CONSOLE_PASSWORD_FILE=/run/secrets/console collector console --addr :8080   # with actions`,
	"collector migrate": `  collector migrate up                 # apply every pending migration
  collector migrate status             # exits 1 while migrations are pending`,
	"collector migrate up": `  collector migrate up --database-url postgres://postgres@127.0.0.1:5432/duecollector
  collector migrate up --dry-run --show-sql      # print what would run, change nothing`,
	"collector migrate down":   `  collector migrate down --to 0 --dry-run --show-sql   # print what reverting everything would run`,
	"collector migrate status": `  collector migrate status`,
	"collector collect-due": `  collector collect-due
  collector collect-due --batch-size 500 --concurrency 32 --max-batches 10`,
	"collector collect": `  collector items --limit 5      # find an ITEM_ID
  collector collect 2ba6d4c8b04cbc5d5b9d6bba23fae3a5`,
	"collector relay-outbox": `  collector relay-outbox --brokers 127.0.0.1:9092
  collector relay-outbox --once --brokers kafka-1:9092,kafka-2:9092`,
	"collector outbox": `  collector outbox list --failed`,
	"collector outbox list": `  collector outbox list
  collector outbox list --failed --limit 20`,
	"collector outbox retry": `  collector outbox retry --id 41 --id 42
  collector outbox retry --all`,
	"collector outbox prune": `  collector outbox prune --older-than 72h --batch 500`,
	"collector prune": `  collector prune --snapshots 720h --sales 2160h
  COLLECTOR_RETENTION_INTEREST=720h collector prune`,
	"collector api-check": `  NEOPLE_MARKET_API_KEY=... collector api-check --items ID1,ID2,ID3 --write-config api.yaml
  NEOPLE_API_BASE_URL=http://127.0.0.1:8089 collector api-check --burst 50`,
	"collector packing":        `  collector packing status`,
	"collector packing status": `  collector packing status`,
	"collector packing on": `  collector packing on
  collector packing on --endpoint /df/auction-sold`,
	"collector packing off":     `  collector packing off --endpoint /df/auction`,
	"collector provider":        `  collector provider status`,
	"collector provider status": `  collector provider status`,
	"collector provider set": `  collector provider set MAINTENANCE --reason "weekly inspection" --for 2h
  collector provider set auto`,
	"collector import-items": `  NEOPLE_ITEM_API_KEY=... collector import-items
  collector import-items --targets my-targets.yaml --allow-missing`,
	"collector seed:real": `  NEOPLE_ITEM_API_KEY=... NEOPLE_MARKET_API_KEY=... collector seed:real`,
	"collector seed:synthetic": `  collector seed:synthetic --items 50 --days 30
  collector seed:synthetic --items 1000000 --days 1   # a large catalog, progress on stderr`,
	"collector purge:synthetic":        `  collector purge:synthetic`,
	"collector recalculate-popularity": `  collector recalculate-popularity`,
	"collector touch":                  `  collector touch 2ba6d4c8b04cbc5d5b9d6bba23fae3a5 --source web`,
	"collector items": `  collector items --tier HOT_1M
  collector items --limit 0 --include-synthetic
  collector items 2ba6d4c8b04cbc5d5b9d6bba23fae3a5   # one item in full, with its estimated rates`,
	"collector items pin":     `  collector items pin 2ba6d4c8b04cbc5d5b9d6bba23fae3a5 HOT_1M`,
	"collector items unpin":   `  collector items unpin 2ba6d4c8b04cbc5d5b9d6bba23fae3a5`,
	"collector items untrack": `  collector items untrack 2ba6d4c8b04cbc5d5b9d6bba23fae3a5`,
	"collector run": `  collector run
  collector run --http-addr 127.0.0.1:9090 --max-sleep 10s --log-format console`,
	"collector status": `  collector status
  collector status -o json | jq .outbox
  collector status --check --max-overdue 100 --max-outbox-age 10m   # exit 1 names the first problem
  collector status --check --min-instances 1 --max-overdue 100       # a daemon deployment: a live instance too`,
	"collector healthcheck": `  collector healthcheck                                   # /readyz on daemon.http_addr
  collector healthcheck --url http://127.0.0.1:8080/_sim/stats`,
	"collector version":      `  collector version`,
	"collector config":       `  collector config print`,
	"collector config print": `  collector config print --config configs/collector.example.yaml`,
}

// registerCompletions offers the fixed choices to shell completion.
func (a *app) registerCompletions(root *cobra.Command) {
	fixed := func(choices ...string) cobra.CompletionFunc {
		return cobra.FixedCompletions(choices, cobra.ShellCompDirectiveNoFileComp)
	}
	_ = root.RegisterFlagCompletionFunc("log-format", fixed("json", "console"))
	_ = root.RegisterFlagCompletionFunc("log-level", fixed("debug", "info", "warn", "error"))
	walk(root, func(c *cobra.Command) {
		switch sharedPath(c) {
		case "collector items":
			_ = c.RegisterFlagCompletionFunc("tier", fixed(strings.Split(tiers.Names(), ", ")...))
		case "collector provider set":
			c.ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return []cobra.Completion{string(provider.Healthy), string(provider.Degraded), string(provider.Maintenance),
					string(provider.Recovering), "auto"}, cobra.ShellCompDirectiveNoFileComp
			}
		}
	})
}
