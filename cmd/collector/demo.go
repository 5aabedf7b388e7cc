package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/daemon"
	"github.com/duecollector/duecollector/internal/devpg"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/seed"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/tiers"
)

func init() { register(newDemoCmd) }

// demo runs the main job on an embedded default: the configured (or a private) PostgreSQL, the
// built-in simulator and an in-process Kafka broker, so a fresh machine sees the whole flow
// with one command and nothing else to set up.
func newDemoCmd(a *app) *cobra.Command {
	var (
		duration time.Duration
		items    int
		dataDir  string
		targets  string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole flow locally: simulator, in-process Kafka, demo items, collection and relay",
		Long: `demo needs nothing but PostgreSQL. If none answers at database.url and PostgreSQL server
binaries are installed, it starts a private throwaway cluster under .data/. It then migrates,
starts the built-in Neople simulator and an in-process Kafka broker, imports the demo items of
configs/import-targets.yaml, runs the daemon (collector run) for --duration, and prints the
status table and a few published events, read back with a Kafka consumer.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			return a.demo(ctx, duration, items, dataDir, targets)
		}),
	}
	f := cmd.Flags()
	f.DurationVar(&duration, "duration", 15*time.Second, "how long to keep collecting and relaying")
	f.IntVar(&items, "sim-items", 200, "items in the simulator's catalog")
	f.StringVar(&dataDir, "data-dir", ".data", "where a private PostgreSQL cluster lives when one is needed")
	f.StringVar(&targets, "targets", "configs/import-targets.yaml", "items to import")
	return cmd
}

func (a *app) demo(ctx context.Context, duration time.Duration, simItems int, dataDir, targets string) error {
	url, stopPG, err := devpg.Ensure(ctx, a.cfg.Database.URL, dataDir+"/pg", a.log)
	if err != nil {
		return err
	}
	defer stopPG()
	a.cfg.Database.URL = url
	if err := store.Migrate(ctx, url, nil); err != nil {
		return err
	}
	a.printf("database   %s (migrated)\n", config.RedactURL(url))

	const itemKey, marketKey = "demo-item-key", "demo-market-key"
	sim := neoplesim.New(neoplesim.Options{Items: simItems, Seed: 42, ItemKey: itemKey, MarketKey: marketKey})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the simulator: %w", err)
	}
	simSrv := &http.Server{Handler: sim, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = simSrv.Serve(ln) }()
	defer simSrv.Close()
	a.cfg.Provider.BaseURL = "http://" + ln.Addr().String()
	a.cfg.Provider.ItemKey, a.cfg.Provider.MarketKey = itemKey, marketKey
	a.printf("provider   Neople simulator at %s (%d items)\n", a.cfg.Provider.BaseURL, simItems)

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, a.cfg.Kafka.Topic))
	if err != nil {
		return fmt.Errorf("start in-process Kafka: %w", err)
	}
	defer kc.Close()
	a.cfg.Kafka.Brokers = kc.ListenAddrs()
	a.printf("kafka      in-process broker at %s, topic %s\n", strings.Join(a.cfg.Kafka.Brokers, ","), a.cfg.Kafka.Topic)

	pool, err := a.db(ctx)
	if err != nil {
		return err
	}
	tgts, err := seed.LoadTargets(targets)
	if err != nil {
		return err
	}
	itemClient, err := provider.FromConfig(a.cfg.Provider, provider.WorkloadItem, a.log)
	if err != nil {
		return err
	}
	defTier, _ := tiers.Parse(a.cfg.Catalog.DefaultTier)
	rep, err := seed.Import(ctx, pool, itemClient, tgts, seed.ImportOptions{DefaultTier: defTier})
	if err != nil {
		return err
	}
	a.printf("import     %d targets: %d new, %d unchanged, %d failed\n", len(tgts), rep.Inserted, rep.Unchanged, len(rep.Failures))

	// The daemon, exactly as `collector run` runs it, with its HTTP server on a free port.
	a.cfg.Daemon.HTTPAddr = "127.0.0.1:0"
	dm, err := a.newDaemon(ctx)
	if err != nil {
		return err
	}
	a.printf("running    the daemon (collector run) for %s; metrics at http://%s/metrics\n", duration, dm.Addr())
	runCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	if err := dm.Run(runCtx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st, err := daemon.Status(ctx, pool, a.cfg.Provider.Name)
	if err != nil {
		return err
	}
	a.printf("\n== collector status\n")
	printStatus(a, st)
	a.printf("\n")
	return a.printEvents(ctx, 3)
}

// printEvents reads a few events back from the broker with a real Kafka consumer.
func (a *app) printEvents(ctx context.Context, n int) error {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: a.cfg.Kafka.Brokers, Topic: a.cfg.Kafka.Topic, Partition: 0, MaxWait: 500 * time.Millisecond})
	defer r.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a.printf("first %d events on %s (partition 0):\n", n, a.cfg.Kafka.Topic)
	for i := 0; i < n; i++ {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				a.printf("  (no more events)\n")
				return nil
			}
			return fmt.Errorf("read events back: %w", err)
		}
		var ceID string
		for _, h := range m.Headers {
			if h.Key == "ce_id" {
				ceID = string(h.Value)
			}
		}
		a.printf("  key=%s ce_id=%s\n  %s\n", m.Key, ceID, m.Value)
	}
	a.log.Debug("demo done", zap.Int("events_shown", n))
	return nil
}
