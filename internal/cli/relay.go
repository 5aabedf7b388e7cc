package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/maintenance"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/retention"
)

// newRelay builds the outbox relay from the validated kafka.* configuration.
func (a *app) newRelay(ctx context.Context) (*outbox.Relay, error) {
	// First: with outbox.enabled false, asking for brokers would send the operator the wrong way.
	if err := a.cfg.Outbox.CheckRelay(); err != nil {
		return nil, err
	}
	if len(a.cfg.Kafka.Brokers) == 0 {
		return nil, errors.New("kafka.brokers is empty: set --brokers or COLLECTOR_KAFKA_BROKERS (host:port,host:port)")
	}
	pool, err := a.db(ctx)
	if err != nil {
		return nil, err
	}
	return outbox.NewRelay(pool, outbox.RelayConfig{KafkaConfig: a.cfg.Kafka, DirectURL: a.cfg.Database.DirectURL}, a.log)
}

func newRelayOutboxCmd(a *app) *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "relay-outbox",
		Short: "Publish outbox events to Kafka (at least once, in order per item)",
		Long: `relay-outbox publishes the snapshot events in the outbox table to Kafka (docs/events.md) and
marks each one published only after the broker acknowledged it (acks=all). Without --once it
keeps following the table until interrupted, backing off while the broker is unavailable, and
runs the one pruner beside it (as collector run does): published rows go after
kafka.outbox_retention, and what retention.* ages are set.

Several relays may run at once: each holds a share of the outbox lanes (all events of one item
share a lane), so per-item order holds. With --once, lanes another relay holds are left to it;
the command says so and exits 0. It exits non-zero when the broker stays unreachable after
outbox.RetryAttemptsDefault (5) tries; unpublished rows stay in the outbox for the next run. It
exits 1 too when the broker refused events for what they are (too large, invalid): they are set
aside until collector outbox retry, and this run is the one a scheduler hears of them from.
Stopped by SIGTERM or Ctrl-C, it says what it published and exits 0, as collect-due does.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			r, err := a.newRelay(ctx)
			if err != nil {
				return err
			}
			defer r.Close() //nolint:errcheck // nothing left to flush after Run/RunOnce returned
			if !once {
				return a.followWithPruner(ctx, r)
			}
			res, err := r.RunOnce(ctx)
			if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
				// A stop asked for (SIGTERM, Ctrl-C) is an end like collect-due's: exit 0,
				// saying so; the rest stays pending for the next run.
				a.printf("published %d, failed %d, in %d batches; interrupted: the rest stays in the outbox for the next run\n",
					res.Published, res.Failed, res.Batches)
				return nil
			}
			if err == nil || res.Batches > 0 {
				a.printf("published %d, failed %d, in %d batches\n", res.Published, res.Failed, res.Batches)
			}
			if err == nil {
				err = a.printLanesLeft(ctx)
			}
			if res.Failed > 0 {
				a.printf("see `collector outbox list --failed`\n")
				if err == nil {
					// Set aside for good until someone acts: a scheduler is told by this run.
					err = fmt.Errorf("the broker refused %d events for what they are; they wait for `collector outbox retry` (`collector outbox list --failed` shows why)", res.Failed)
				}
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&once, "once", false, "publish what is pending, then exit (for cron and scripts)")
	f.Int("batch-size", 0, "events per batch (kafka.batch_size)")
	f.StringSlice("brokers", nil, "publish to the Kafka brokers at `HOST:PORT,...` (kafka.brokers)")
	f.String("topic", "", "topic (kafka.topic)")
	a.bindFlag("kafka.batch_size", f.Lookup("batch-size"))
	a.bindFlag("kafka.brokers", f.Lookup("brokers"))
	a.bindFlag("kafka.topic", f.Lookup("topic"))
	return cmd
}

// followPruneInterval is the following relay's pause between pruner turns; 0 is the
// pruner's default (retention.IntervalDefault). Tests shorten it.
var followPruneInterval time.Duration

// followWithPruner follows the outbox with r and runs the one pruner beside it, so a relay
// without a daemon still bounds the outbox.
func (a *app) followWithPruner(ctx context.Context, r *outbox.Relay) error {
	pool, err := a.db(ctx)
	if err != nil {
		return err
	}
	cfg := retention.FromConfig(a.cfg)
	cfg.Interval = followPruneInterval
	p, err := retention.New(pool, cfg)
	if err != nil {
		return err
	}
	p.OnTurn = func(res retention.Result, err error) {
		retention.LogTurn(a.log, p.Config(), res) // what the other tables' pruning did, also when one failed
		if err != nil && ctx.Err() == nil {
			a.log.Warn("pruning collected history failed; next run after the interval", zap.Error(err))
		}
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		maintenance.Runner{Restart: a.bgRestart, Log: a.log}.Run(pctx, "retention", p.Start)
	}()
	err = r.Run(ctx)
	stop()
	<-done
	if err == nil {
		res := r.Followed()
		a.printf("published %d, failed %d, in %d batches; stopped\n", res.Published, res.Failed, res.Batches)
	}
	return err
}

// printLanesLeft names the lanes --once left to other relays: its own are released by now.
func (a *app) printLanesLeft(ctx context.Context) error {
	pool, err := a.db(ctx)
	if err != nil {
		return err
	}
	st, err := outbox.ReadRelayState(ctx, pool)
	if err != nil || st.LanesHeld == 0 {
		return err
	}
	a.printf("%d of %d lanes are held by another relay (%s) with %d pending events; left to it\n",
		st.LanesHeld, outbox.Lanes, strings.Join(st.Owners, ", "), st.Pending)
	return nil
}

// relayOncePass is seed:real's relay step: it drains the outbox once, like `relay-outbox --once`.
func (a *app) relayOncePass(ctx context.Context) error {
	r, err := a.newRelay(ctx)
	if err != nil {
		return err
	}
	defer r.Close()
	res, err := r.RunOnce(ctx)
	a.printf("relay-outbox: published %d, failed %d\n", res.Published, res.Failed)
	return err
}
