package outbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// The victim is this test binary run again as a relay of its own (a real process, so that
// kill -9 leaves its lanes exactly as a node lost or an OOM kill does: leased, unreleased).
const (
	victimEnv      = "OUTBOX_TEST_VICTIM_RELAY" // "dbURL|broker,broker"
	victimLease    = 4 * time.Second            // room for a loaded machine between the kill and the first look
	victimAcquired = "acquired outbox lanes"
)

// runVictimIfAsked runs the victim relay and never returns when the environment asks for one.
func runVictimIfAsked() {
	spec := os.Getenv(victimEnv)
	if spec == "" {
		return
	}
	dbURL, brokers, _ := strings.Cut(spec, "|")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		os.Exit(2)
	}
	cfg := testConfig(strings.Split(brokers, ","), "victim")
	cfg.Lease, cfg.WriteTimeout = victimLease, 500*time.Millisecond
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(os.Stdout), zap.InfoLevel))
	r, err := NewRelay(pool, cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		os.Exit(2)
	}
	err = r.Run(ctx)
	fmt.Fprintln(os.Stderr, "victim: relay returned:", err)
	os.Exit(3)
}

// startVictim starts a victim relay and returns once it holds every lane.
func startVictim(t *testing.T, dbURL string, brokers []string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), victimEnv+"="+dbURL+"|"+strings.Join(brokers, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		var entry struct {
			Msg  string `json:"msg"`
			Held int    `json:"held"`
		}
		if json.Unmarshal(lines.Bytes(), &entry) == nil && entry.Msg == victimAcquired && entry.Held == Lanes {
			go func() { // keep draining, so that the victim never blocks on a full pipe
				for lines.Scan() {
				}
			}()
			return cmd
		}
	}
	t.Fatalf("victim relay exited before holding every lane: %v", lines.Err())
	return nil
}

// kill9 kills the victim with SIGKILL: no deferred release, no goodbye to the database.
func kill9(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// untilLeasesExpire waits, on the database's clock, for the last lane lease to run out: the
// lease is the time the dead holder is owed, so this is the one wait the takeover needs.
func untilLeasesExpire(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
		SELECT pg_sleep(greatest(0, extract(epoch FROM max(lease_expires_at) - clock_timestamp())) + 0.05)
		FROM outbox_relay_lanes`); err != nil {
		t.Fatal(err)
	}
}

// A relay killed with SIGKILL keeps its lanes leased; any later relay, in either mode, takes
// them once the leases expire and publishes what waits in them, each item in order.
func TestLanesOfAKilledRelayAreTakenOver(t *testing.T) {
	pool, dbURL := storetest.NewPool(t)
	broker := newBroker(t)
	ctx := context.Background()

	// A pass (relay-outbox --once, a cron job) run after the kill.
	victim := startVictim(t, dbURL, broker.ListenAddrs())
	kill9(t, victim)
	// Read at once: the dead relay's last renewal runs out a lease after it.
	if st, err := ReadRelayState(ctx, pool); err != nil || st.LanesHeld != Lanes {
		t.Fatalf("after the kill: %+v %v, want every lane still held by the dead relay", st, err)
	}
	enqueue(t, pool, snapshotEvents(40, 3))
	untilLeasesExpire(t, pool)
	once, _ := newTestRelay(t, pool, testConfig(broker.ListenAddrs(), "cron"))
	res, err := once.RunOnce(ctx)
	if err != nil || res.Published != 120 {
		t.Fatalf("relay-outbox --once after a killed relay's leases expired: %+v %v, want 120 published", res, err)
	}

	// A following relay (the daemon's, relay-outbox) started after another kill: it takes the
	// lanes by itself once they expire, however many times that happens.
	for round := range 2 {
		victim = startVictim(t, dbURL, broker.ListenAddrs())
		kill9(t, victim)
		enqueue(t, pool, snapshotEvents(40, 2))
		follow, sig := newTestRelay(t, pool, testConfig(broker.ListenAddrs(), fmt.Sprintf("daemon-%d", round)))
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- follow.Run(rctx) }()
		for got := 0; got < 80; {
			got += len(sig.Published.WaitWithin(t, time.Minute))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: follow relay: %v", round, err)
		}
	}
	if n := countWhere(t, pool, "state <> 'published'"); n != 0 {
		t.Fatalf("%d rows left unpublished", n)
	}
	checkDelivery(t, outboxRows(t, pool), consumeAll(t, broker, testTopic))
}

// A stop that comes while a relay takes lanes lets the statement finish and frees what it took:
// cut, an acquisition the server had already committed would leave the lanes to nobody until
// the lease ran out.
func TestALaneAcquisitionUnderWayAtAStopIsHandedBack(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	r, _ := newTestRelay(t, pool, testConfig([]string{"127.0.0.1:1"}, "stopping"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // SIGTERM as the statement leaves
	got, _, err := r.lanes.renew(ctx, true)
	if err != nil || len(got) != Lanes {
		t.Fatalf("acquisition at a stop: %d lanes, %v; want all %d taken, not the statement cut", len(got), err, Lanes)
	}
	r.releaseLanes(ctx, 0)
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_relay_lanes
		WHERE lease_token IS NOT NULL OR lease_expires_at > now()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d lanes still leased after the stop", n)
	}
}
