package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/duecollector/duecollector/configs"
	"github.com/duecollector/duecollector/internal/api"
	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/cli"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/devpg"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/tiers"
)

// newDemoCmd is `collector-dev demo`: the main job on an embedded default (the configured or a
// private PostgreSQL, the built-in simulator and an in-process Kafka broker), so a fresh
// machine sees the whole flow with one command and nothing else to set up.
func newDemoCmd(h cli.Host) *cobra.Command {
	var o demoOptions
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:   "demo",
		Short: "Run the whole flow locally: simulator, in-process Kafka, demo items, collection and relay",
		Long: `demo needs nothing but PostgreSQL. If none answers at database.url and PostgreSQL server
binaries are installed, it starts a private throwaway cluster under .data/. It then migrates,
starts the built-in Neople simulator and an in-process Kafka broker, imports the demo items of
configs/import-targets.yaml (the copy built into the binary when the file is not there), runs
the daemon (collector run) for --duration, and prints how many events it published, the status
table and a few published events, read back with a Kafka consumer. Logs are console lines
unless --log-format, COLLECTOR_LOG_FORMAT or a config file says otherwise.

The daemon serves the operator console (docs/console.md) during the run, at the URL it prints.
With --keep it serves it on console.addr (127.0.0.1:8080 by default) and keeps it open after the
run until Ctrl-C, with the simulator and the broker.

With --keep-broker or --kafka-addr the broker listens on a fixed address (127.0.0.1:9092 by
default) and stays up after the run until Ctrl-C, so kcat or any Kafka client can read the topic.`,
		Example: `  collector-dev demo
  collector-dev demo --duration 1m --keep-broker     # then: kcat -C -b 127.0.0.1:9092 -t market.auction-snapshots.v1
  collector-dev demo --log-format json                # the daemon's structured logs instead of console ones
  collector-dev demo --keep                           # then open http://127.0.0.1:8080/ until Ctrl-C`,
		Args: cobra.NoArgs,
		RunE: h.Run(func(ctx context.Context) error {
			d := demo{h: h, cfg: h.Config()}
			if err := d.logs(cmd); err != nil {
				return err
			}
			o.targetsGiven = cmd.Flags().Changed("targets")
			return d.run(ctx, o)
		}),
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "duration", 15*time.Second, "how long to keep collecting and relaying")
	f.IntVar(&o.simItems, "sim-items", 200, "items in the simulator's catalog")
	f.StringVar(&o.dataDir, "data-dir", ".data", "where a private PostgreSQL cluster lives when one is needed")
	f.StringVar(&o.targets, "targets", configs.ImportTargetsPath, "items to import (the built-in copy when this default file is absent)")
	f.BoolVar(&o.keep, "keep", false, "keep the console open after the run until Ctrl-C (on console.addr)")
	f.BoolVar(&o.keepBroker, "keep-broker", false, "keep the Kafka broker listening after the run until Ctrl-C (on --kafka-addr)")
	f.StringVar(&o.kafkaAddr, "kafka-addr", "", "run the broker on `HOST:PORT` and keep it after the run (default with --keep-broker 127.0.0.1:9092; else a free port)")
	return cmd
}

type demoOptions struct {
	duration                 time.Duration
	simItems                 int
	dataDir, targets         string
	targetsGiven, keepBroker bool
	keep                     bool // the console stays open after the run
	kafkaAddr                string
}

// demo is one run of the command over the shared CLI state.
type demo struct {
	h   cli.Host
	cfg *config.Config
}

func (d demo) printf(format string, args ...any) { fmt.Fprintf(d.h.Stdout(), format, args...) }

// logs switches to console logs unless the user chose a format (flag, environment, file).
func (d demo) logs(cmd *cobra.Command) error {
	if cmd.Flags().Changed("log-format") || os.Getenv(config.EnvName("log.format")) != "" || d.h.ConfigPath() != "" {
		return nil
	}
	logger, err := telemetry.NewLogger(d.cfg.Log.Level, "console", d.h.Stderr())
	if err != nil {
		return err
	}
	d.h.SetLog(logger, "console")
	return nil
}

// demoTargets reads the targets file, or the built-in copy when the default file is absent
// (demo run outside the repository).
func demoTargets(o demoOptions) ([]catalog.Target, string, error) {
	if _, err := os.Stat(o.targets); err != nil && errors.Is(err, fs.ErrNotExist) && !o.targetsGiven {
		t, err := catalog.ParseTargets(o.targets+" (built in)", configs.ImportTargets)
		return t, o.targets + " (built in)", err
	}
	t, err := catalog.LoadTargets(o.targets)
	return t, o.targets, err
}

func (d demo) run(ctx context.Context, o demoOptions) error {
	url, stopPG, err := devpg.Ensure(ctx, d.cfg.Database.URL, o.dataDir+"/pg", d.h.Log())
	if err != nil {
		return err
	}
	defer stopPG()
	d.cfg.Database.URL = url
	if err := store.Migrate(ctx, url, nil); err != nil {
		return err
	}
	d.printf("database   %s (migrated)\n", config.RedactURL(url))

	const itemKey, marketKey = "demo-item-key", "demo-market-key"
	sim := neoplesim.New(neoplesim.Options{Items: o.simItems, Seed: 42, ItemKey: itemKey, MarketKey: marketKey})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the simulator: %w", err)
	}
	simSrv := &http.Server{Handler: sim, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = simSrv.Serve(ln) }()
	defer simSrv.Close()
	d.cfg.Provider.BaseURL = "http://" + ln.Addr().String()
	d.cfg.Provider.ItemKey, d.cfg.Provider.MarketKey = itemKey, marketKey
	d.printf("provider   Neople simulator at %s (%d items)\n", d.cfg.Provider.BaseURL, o.simItems)

	keep := o.keepBroker || o.kafkaAddr != ""
	kafkaAddr := o.kafkaAddr
	if kafkaAddr == "" {
		kafkaAddr = "127.0.0.1:0"
		if keep {
			kafkaAddr = "127.0.0.1:9092"
		}
	}
	listen := func(network, _ string) (net.Listener, error) { return net.Listen(network, kafkaAddr) }
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, d.cfg.Kafka.Topic), kfake.ListenFn(listen))
	if err != nil {
		return fmt.Errorf("start in-process Kafka: %w", err)
	}
	defer kc.Close()
	d.cfg.Kafka.Brokers = kc.ListenAddrs()
	d.cfg.Outbox.Enabled = true // the demo shows events published end to end
	d.printf("kafka      in-process broker at %s, topic %s\n", strings.Join(d.cfg.Kafka.Brokers, ","), d.cfg.Kafka.Topic)

	pool, err := d.h.DB(ctx)
	if err != nil {
		return err
	}
	tgts, from, err := demoTargets(o)
	if err != nil {
		return err
	}
	itemClient, err := provider.FromConfig(d.cfg.Provider, provider.WorkloadItem, d.h.Log())
	if err != nil {
		return err
	}
	defTier, _ := tiers.Parse(d.cfg.Catalog.DefaultTier)
	rep, err := catalog.Import(ctx, pool, itemClient, tgts, catalog.ImportOptions{DefaultTier: defTier})
	if err != nil {
		return err
	}
	d.printf("import     %d targets from %s: %d new, %d unchanged, %d failed\n", len(tgts), from, rep.Inserted, rep.Unchanged, len(rep.Failures))
	before, err := outbox.ReadBacklog(ctx, pool, true)
	if err != nil {
		return err
	}

	// The daemon, exactly as `collector run` runs it, with its HTTP server on a free port.
	d.cfg.Daemon.HTTPAddr = "127.0.0.1:0"
	if o.keep {
		d.cfg.Daemon.HTTPAddr = d.cfg.Console.Addr
	}
	d.cfg.Console.Enabled = true
	// Slow start protects a real provider from a new client's burst; the built-in simulator
	// needs no protecting, and a short demo run would spend its seconds on the ramp.
	d.cfg.Daemon.Budget.SlowStart = false
	dm, err := d.h.NewDaemon(ctx, false)
	if err != nil {
		return err
	}
	d.printf("running    the daemon (collector run) for %s; metrics at http://%s/metrics\n", o.duration, dm.Addr())
	d.printf("console    %s\n", cli.HostURL(dm.Addr()))
	d.printf("read API   %slatest (docs/api.md)\n", strings.TrimSuffix(cli.HostURL(dm.Addr()), "/")+api.Prefix)
	hb := budget.Tuned(d.cfg.Daemon.Budget).Heartbeat
	d.printf("           (its first calls wait %s–%s, two to three budget heartbeats, so that\n"+
		"           instances already sharing the API key's budget lower their share before it sends)\n", 2*hb, 3*hb)
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	if err := dm.Run(runCtx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	after, err := outbox.ReadBacklog(ctx, pool, true)
	if err != nil {
		return err
	}
	d.printf("relay      %d events published to %s during the run; %d pending, %d failed\n",
		max(after.Published-before.Published, 0), d.cfg.Kafka.Topic, after.Pending, after.Failed)
	d.printf("\n== collector status\n")
	if err := d.h.PrintStatus(ctx, pool); err != nil {
		return err
	}
	d.printf("(the lag counts from when each item became due, so after a pause, such as between two\n" +
		" demo runs on the same database, it includes the time no collector was running)\n\n")
	if err := d.printEvents(ctx, 3); err != nil {
		return err
	}
	if !keep && !o.keep {
		return nil
	}
	if keep {
		d.printf("\nkafka      broker kept at %s until Ctrl-C; read it with\n"+
			"           kcat -C -b %s -t %s -f '%%k %%h\\n%%s\\n\\n'\n",
			strings.Join(d.cfg.Kafka.Brokers, ","), d.cfg.Kafka.Brokers[0], d.cfg.Kafka.Topic)
	}
	if !o.keep {
		<-ctx.Done()
		return nil
	}
	// The daemon has stopped and closed its server: the console alone takes its address.
	cln, err := net.Listen("tcp", dm.Addr())
	if err != nil {
		return fmt.Errorf("keep the console: %w", err)
	}
	d.printf("\nconsole    kept at %s until Ctrl-C, the read API beside it\n", cli.HostURL(dm.Addr()))
	return d.h.ServeConsole(ctx, cln, pool)
}

// printEvents reads up to n events back from the broker with a real Kafka consumer, from
// every partition that has any.
func (d demo) printEvents(ctx context.Context, n int) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d.printf("first events on %s, read back from the broker:\n", d.cfg.Kafka.Topic)
	conn, err := kafka.DialContext(rctx, "tcp", d.cfg.Kafka.Brokers[0])
	if err != nil {
		return fmt.Errorf("read events back: %w", err)
	}
	parts, err := conn.ReadPartitions(d.cfg.Kafka.Topic)
	_ = conn.Close()
	if err != nil {
		return fmt.Errorf("read events back: %w", err)
	}
	shown := 0
	for _, p := range parts {
		lc, err := kafka.DialLeader(rctx, "tcp", d.cfg.Kafka.Brokers[0], d.cfg.Kafka.Topic, p.ID)
		if err != nil {
			return fmt.Errorf("read events back: %w", err)
		}
		first, last, err := lc.ReadOffsets()
		_ = lc.Close()
		if err != nil {
			return fmt.Errorf("read events back: %w", err)
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: d.cfg.Kafka.Brokers, Topic: d.cfg.Kafka.Topic, Partition: p.ID, MaxWait: 500 * time.Millisecond})
		for off := first; off < last && shown < n; off++ {
			m, err := r.ReadMessage(rctx)
			if err != nil {
				_ = r.Close()
				return fmt.Errorf("read events back from partition %d: %w", p.ID, err)
			}
			var ceID string
			for _, h := range m.Headers {
				if h.Key == "ce_id" {
					ceID = string(h.Value)
				}
			}
			d.printf("  partition=%d key=%s ce_id=%s\n  %s\n", m.Partition, m.Key, ceID, m.Value)
			shown++
		}
		_ = r.Close()
	}
	if shown == 0 {
		d.printf("  (none)\n")
	}
	return nil
}
