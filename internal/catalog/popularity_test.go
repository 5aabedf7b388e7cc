package catalog

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// testPolicy is the default configuration under the thresholds policy, whose tiers these tests
// check; the budget policy has its own tests (plan_test.go).
func testPolicy() Policy {
	c := config.Default()
	p := PolicyFromConfig(c.Catalog, budget.ConfiguredPlanLimit(c), packing.Model{})
	p.Mode = config.PolicyThresholds
	return p
}

func TestScore(t *testing.T) {
	w := config.ScoreWeights{Sales: 1, Volume: 0.5, Churn: 0.1}
	for _, tc := range []struct {
		name string
		s    Signals
		want float64
	}{
		{"nothing", Signals{}, 0},
		{"sales per hour", Signals{Sales: 48}, 2},
		{"volume is logarithmic", Signals{Gold: 24 * 999}, 0.5 * 3},
		{"churn per hour", Signals{Churn: 240}, 1},
		{"interest adds as is", Signals{Interest: 2.5}, 2.5},
		{"everything", Signals{Sales: 24, Gold: 24 * 99, Churn: 24, Interest: 1}, 1 + 0.5*2 + 0.1 + 1},
		// Rounded to 3 decimals: interest decaying a little between runs rewrites no row.
		{"rounded", Signals{Interest: 1.23456}, 1.235},
	} {
		if got := Score(tc.s, w, 24*time.Hour); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: Score = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// An interest event stamped in the future (a skewed clock where it was written) counts as new,
// not as more: its decay is clamped at none.
func TestInterestFromTheFutureCountsAsNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	p := testPolicy()
	now, future := randomItemID(t), randomItemID(t)
	for _, id := range []string{now, future} {
		item(t, pool, id, tiers.Warm, storetest.In(time.Minute), storetest.Ago(time.Hour), storetest.Ago(time.Hour))
	}
	storetest.Interests(t, pool, storetest.Interest{ItemID: now}, storetest.Interest{ItemID: future, OccurredAt: storetest.In(10 * p.InterestHalfLife)})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	items, _, err := readSignals(ctx, tx, p)
	if err != nil {
		t.Fatal(err)
	}
	interest := map[string]float64{}
	for _, it := range items {
		interest[it.ItemID] = it.Signals.Interest
	}
	if interest[now] <= 0 || math.Abs(interest[future]-interest[now]) > 0.01*interest[now] {
		t.Fatalf("interest of an event now %v, of one stamped %s ahead %v; want the same", interest[now], 10*p.InterestHalfLife, interest[future])
	}
}

// item inserts a tracked item whose tier was last set (reason "test") at changed.
func item(t *testing.T, db DB, id string, tier tiers.Tier, next, created, changed storetest.Time) {
	t.Helper()
	storetest.Items(t, db, storetest.Item{ID: id, Tier: tier, NextCollectAt: next, CreatedAt: created, TierChangedAt: changed, TierReason: "test"})
}

type schedule struct {
	Tier     string
	Next     *time.Time
	DueNow   bool
	Reason   string
	Changed  *time.Time
	Score    float64
	DBNow    time.Time
	LeaseTok *string
}

func readSchedule(t *testing.T, db DB, id string) schedule {
	t.Helper()
	var s schedule
	err := db.QueryRow(context.Background(), `
		SELECT collection_tier, next_collect_at, coalesce(next_collect_at <= now(), false), coalesce(tier_reason, ''),
		       tier_changed_at, popularity_score, now(), lease_token::text
		FROM tracked_items WHERE item_id = $1`, id).
		Scan(&s.Tier, &s.Next, &s.DueNow, &s.Reason, &s.Changed, &s.Score, &s.DBNow, &s.LeaseTok)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	return s
}

func recalc(t *testing.T, db DB, p Policy) Result {
	t.Helper()
	res, err := RecalculatePopularity(context.Background(), db, p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestDormancyAndReactivationBySQLInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	p := testPolicy()
	id := randomItemID(t)
	item(t, pool, id, tiers.Warm, storetest.In(time.Minute), storetest.Ago(100*time.Hour), storetest.Ago(100*time.Hour))

	res := recalc(t, pool, p)
	s := readSchedule(t, pool, id)
	if s.Tier != "DORMANT" || s.Next != nil || s.Reason != "no sales or interest for 72h0m0s" || res.Dormant != 1 {
		t.Fatalf("after a quiet 100 h: %+v (result %+v); want DORMANT, next NULL", s, res)
	}
	if s.Changed == nil || !s.Changed.Equal(res.Now) {
		t.Errorf("tier_changed_at = %v, want the run's now %v", s.Changed, res.Now)
	}

	// Another service writes an interest event straight into the table.
	if _, err := pool.Exec(ctx, `INSERT INTO item_interest (item_id, kind, source) VALUES ($1, 'view', 'web')`, id); err != nil {
		t.Fatal(err)
	}
	res = recalc(t, pool, p)
	s = readSchedule(t, pool, id)
	if s.Tier != "ACTIVE_3M" || !s.DueNow || res.Reactivated != 1 || !strings.Contains(s.Reason, "view event") ||
		!strings.Contains(s.Reason, "reactivated from DORMANT") {
		t.Fatalf("after an interest event: %+v (result %+v); want ACTIVE_3M and due now", s, res)
	}

	// The event has been acted on: the next run neither reactivates again nor demotes (hold).
	res = recalc(t, pool, p)
	if s2 := readSchedule(t, pool, id); s2.Tier != "ACTIVE_3M" || res.Reactivated != 0 || res.Held != 1 || !s2.Next.Equal(*s.Next) {
		t.Fatalf("second run: %+v (result %+v)", s2, res)
	}
}

func TestRecordInterestReactivatesInOneStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	dormant, cold, hot := randomItemID(t), randomItemID(t), randomItemID(t)
	item(t, pool, dormant, tiers.Dormant, storetest.Null(), storetest.Ago(100*time.Hour), storetest.Ago(10*time.Hour))
	item(t, pool, cold, tiers.Cold, storetest.In(9*time.Minute), storetest.Ago(100*time.Hour), storetest.Ago(10*time.Hour))
	item(t, pool, hot, tiers.Hot, storetest.In(30*time.Second), storetest.Ago(100*time.Hour), storetest.Ago(10*time.Hour))

	r, err := RecordInterest(ctx, pool, InterestEvent{ItemID: dormant, Kind: KindTouch, Source: "cli"}, tiers.Active)
	if err != nil {
		t.Fatal(err)
	}
	s := readSchedule(t, pool, dormant)
	if !r.Reactivated || r.From != tiers.Dormant || r.To != tiers.Active || s.Tier != "ACTIVE_3M" || !s.DueNow ||
		s.Reason != "touch event from cli: reactivated from DORMANT" {
		t.Fatalf("touch on a DORMANT item: %+v, row %+v", r, s)
	}
	if r, err = RecordInterest(ctx, pool, InterestEvent{ItemID: cold, Kind: KindWatch, Weight: 2}, tiers.Hot); err != nil || !r.Reactivated {
		t.Fatal(r, err)
	}
	if s := readSchedule(t, pool, cold); s.Tier != "HOT_1M" || !s.DueNow {
		t.Fatalf("watch on a COLD item: %+v", s)
	}
	before := readSchedule(t, pool, hot)
	if r, err = RecordInterest(ctx, pool, InterestEvent{ItemID: hot, Kind: KindView}, tiers.Active); err != nil || r.Reactivated {
		t.Fatal(r, err)
	}
	if s := readSchedule(t, pool, hot); s.Tier != "HOT_1M" || !s.Next.Equal(*before.Next) {
		t.Fatalf("view on a HOT item changed its schedule: %+v → %+v", before, s)
	}
	var events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM item_interest`).Scan(&events); err != nil || events != 3 {
		t.Fatalf("item_interest rows = %d, %v; want 3", events, err)
	}

	// Recalculation sees those events as acted on: nothing is reactivated twice.
	if res := recalc(t, pool, testPolicy()); res.Reactivated != 0 {
		t.Errorf("recalculation reactivated again: %+v", res)
	}

	unknown := randomItemID(t)
	if _, err := RecordInterest(ctx, pool, InterestEvent{ItemID: unknown, Kind: KindTouch}, tiers.Active); !errors.Is(err, ErrNotTracked) ||
		!strings.Contains(err.Error(), unknown) {
		t.Errorf("touch on an unknown item: %v, want ErrNotTracked naming it", err)
	}
	if _, err := RecordInterest(ctx, pool, InterestEvent{ItemID: hot, Kind: "like"}, tiers.Active); err == nil {
		t.Error("kind like accepted")
	}
}

func TestTierChangesRescheduleOnPhase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	p := testPolicy()
	p.Window = time.Hour
	p.Thresholds = tiers.Thresholds{Hot: 3, Active: 2, Warm: 1}
	p.Weights = config.ScoreWeights{Sales: 1}

	soon, late, demote, leased, fixture := randomItemID(t), randomItemID(t), randomItemID(t), randomItemID(t), "seed-0001"
	old := storetest.Ago(100 * time.Hour)
	item(t, pool, soon, tiers.Cold, storetest.In(5*time.Second), old, old)
	item(t, pool, late, tiers.Cold, storetest.In(9*time.Minute), old, old)
	item(t, pool, demote, tiers.Hot, storetest.In(20*time.Second), old, old)
	item(t, pool, leased, tiers.Cold, storetest.In(9*time.Minute), old, old)
	item(t, pool, fixture, tiers.Warm, storetest.Null(), old, old)
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute', leased_by = 'w1' WHERE item_id = $1`, leased); err != nil {
		t.Fatal(err)
	}
	// Five sales in the last hour promote to HOT; one keeps demote awake but scores it COLD.
	var sales []storetest.Sale
	for _, id := range []string{soon, late, leased, fixture} {
		for g := 1; g <= 5; g++ {
			sales = append(sales, storetest.Sale{ItemID: id, SoldAt: storetest.Ago(time.Duration(g) * time.Minute), UnitPrice: 100})
		}
	}
	sales = append(sales, storetest.Sale{ItemID: demote, SoldAt: storetest.Ago(2 * time.Hour), UnitPrice: 1})
	storetest.Sales(t, pool, sales...)
	leaseBefore := readSchedule(t, pool, leased)

	res := recalc(t, pool, p)
	if res.Scored != 4 {
		t.Errorf("scored %d items, want 4 (the fixture is left alone)", res.Scored)
	}
	near := func(a, b time.Time) bool { return a.Sub(b).Abs() <= time.Microsecond }

	// A promotion whose new slot is later than the current one keeps the current one.
	s := readSchedule(t, pool, soon)
	if s.Tier != "HOT_1M" || s.Next == nil || s.Next.Sub(res.Now) > 5*time.Second || s.Reason != "score 5 ≥ hot threshold 3" {
		t.Errorf("promoted item due in 5 s: %+v (now %v)", s, res.Now)
	}
	// A promotion whose new slot is earlier moves to the new tier's phase.
	want, _ := tiers.NextDue(late, tiers.Hot, res.Now)
	if s := readSchedule(t, pool, late); s.Tier != "HOT_1M" || s.Next == nil || !near(*s.Next, want) {
		t.Errorf("promoted item due in 9 min: %+v, want next %v", s, want)
	}
	// A demotion takes the new tier's slot.
	want, _ = tiers.NextDue(demote, tiers.Cold, res.Now)
	if s := readSchedule(t, pool, demote); s.Tier != "COLD_10M" || s.Next == nil || !near(*s.Next, want) || s.Reason != "score 0 < warm threshold 1" {
		t.Errorf("demoted item: %+v, want next %v", s, want)
	}
	// A leased row changes tier but keeps its lease.
	if s := readSchedule(t, pool, leased); s.Tier != "HOT_1M" || s.LeaseTok == nil || *s.LeaseTok != *leaseBefore.LeaseTok {
		t.Errorf("leased item: %+v, lease before %v", s, *leaseBefore.LeaseTok)
	}
	// The fixture is untouched and still unscheduled.
	if s := readSchedule(t, pool, fixture); s.Tier != "WARM_5M" || s.Next != nil || s.Score != 0 {
		t.Errorf("fixture touched by recalculation: %+v", s)
	}
	if res.Promoted != 3 || res.Demoted != 1 || len(res.Changes) != 4 {
		t.Errorf("result %+v", res)
	}

	// Nothing changed since: a second run writes nothing.
	if res := recalc(t, pool, p); len(res.Changes) != 0 || res.ScoreChanged != 0 {
		t.Errorf("second run changed %+v", res)
	}
}

// One recalculation at a time: one that finds another running waits for it, and skips when
// it committed a plan.
func TestRecalculationRunsOneAtATime(t *testing.T) {
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	item(t, pool, randomItemID(t), tiers.Warm, storetest.Now(), storetest.Ago(100*time.Hour), storetest.Ago(100*time.Hour))
	holder := holdRecalculation(t, pool)
	recalcWaiting = func() {
		if _, err := holder.Exec(ctx, `INSERT INTO tier_forecast (tier, items, demand, freshness, weight, planned_at)
			VALUES ('WARM_5M', 1, 0.1, 0.5, 1, now())`); err != nil {
			t.Error(err)
		}
		if err := holder.Commit(ctx); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { recalcWaiting = func() {} })
	if res := recalc(t, pool, testPolicy()); !res.Skipped || res.Scored != 0 {
		t.Fatalf("recalculation while another commits one: %+v", res)
	}
	recalcWaiting = func() {}
	if res := recalc(t, pool, testPolicy()); res.Skipped || res.Dormant != 1 {
		t.Fatalf("recalculation after the other one is done: %+v", res)
	}
}

// An operator's pin made while a recalculation decides wins: the recalculation skips the
// item (a conflict) rather than writing a tier decided for it unpinned, also when the pin
// keeps the tier the item had.
func TestAPinDuringARecalculationWins(t *testing.T) {
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	id := randomItemID(t)
	item(t, pool, id, tiers.Warm, storetest.Now(), storetest.Ago(100*time.Hour), storetest.Ago(100*time.Hour))
	recalcRead = func() {
		if _, err := PinItem(ctx, pool, id, tiers.Warm); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { recalcRead = func() {} })
	res := recalc(t, pool, testPolicy())
	var tier, pinned string
	if err := pool.QueryRow(ctx, `SELECT collection_tier, coalesce(pinned_tier, '') FROM tracked_items WHERE item_id = $1`, id).Scan(&tier, &pinned); err != nil {
		t.Fatal(err)
	}
	if tier != string(tiers.Warm) || pinned != string(tiers.Warm) || res.Conflicts != 1 {
		t.Fatalf("pinned to WARM_5M during a recalculation that decided it dormant: %s pinned %q, %+v; want it kept, a conflict", tier, pinned, res)
	}
}

// A recalculation whose holder died (its session gone, nothing committed) is done by the
// next one at once, not left to the next scheduled run.
func TestRecalculationOfADeadHolderIsTakenOver(t *testing.T) {
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	item(t, pool, randomItemID(t), tiers.Warm, storetest.Now(), storetest.Ago(100*time.Hour), storetest.Ago(100*time.Hour))
	holder := holdRecalculation(t, pool)
	var pid int
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	recalcWaiting = func() {
		if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { recalcWaiting = func() {} })
	if res := recalc(t, pool, testPolicy()); res.Skipped || res.Dormant != 1 {
		t.Fatalf("recalculation after the holder died: %+v", res)
	}
}

// holdRecalculation takes the recalculation's lock in a transaction of its own, as a running
// recalculation holds it.
func holdRecalculation(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, recalcLockKey); err != nil {
		t.Fatal(err)
	}
	return tx
}

// A move of an item being collected right now (a pin, a reactivation, a recalculation's
// promotion) is served by that collection: its next one is on the new tier's phase, ahead,
// not the past due time the claim is serving, which its write-back (keeping the schedule of a
// tier that changed) would make due again at once.
func TestAMoveDuringACollectionSchedulesTheNextAhead(t *testing.T) {
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	pinned, touched := randomItemID(t), randomItemID(t)
	storetest.Items(t, pool, storetest.Item{ID: pinned, Tier: tiers.Warm, NextCollectAt: storetest.Ago(time.Minute)},
		storetest.Item{ID: touched, Tier: tiers.Cold, NextCollectAt: storetest.Ago(time.Minute)})
	for _, id := range []string{pinned, touched} {
		if c, err := ClaimOne(ctx, pool, id, time.Minute, "test"); err != nil || len(c) != 1 {
			t.Fatalf("claim %s: %d, %v", id, len(c), err)
		}
	}
	c, err := PinItem(ctx, pool, pinned, tiers.Hot)
	if err != nil || c.NextCollectAt == nil || !c.NextCollectAt.After(time.Now().Add(-time.Second)) {
		t.Fatalf("pinned to HOT_1M while being collected: next %v, %v; want ahead", c.NextCollectAt, err)
	}
	r, err := RecordInterest(ctx, pool, InterestEvent{ItemID: touched, Kind: KindTouch}, tiers.Active)
	if err != nil || !r.Reactivated || r.NextCollectAt == nil || !r.NextCollectAt.After(time.Now().Add(-time.Second)) {
		t.Fatalf("reactivated while being collected: %+v, %v; want its next collection ahead", r, err)
	}
}

// A recalculation whose process freezes mid-read (SIGSTOP, a paused VM) holding the first row
// of a read of every item lets go of the recalculation within the idle bound: its session
// waits idle in the transaction, which the bound ends, and the next instance's recalculation
// takes over. A read streamed in one statement left the session active, blocked sending the
// rest into the full sockets where no bound reaches, and every other instance waited out
// recalcWait and skipped, for as long as the process stayed frozen.
func TestARecalculationFrozenMidReadIsTakenOver(t *testing.T) {
	ctx := context.Background()
	pool, url := storetest.NewPool(t)
	const n = 150_000 // tens of MB of signals, more than the sockets hold
	storetest.PartitionDays(t, pool, -2, 1, partition.Snapshots, partition.Sales)
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT 'frozen-read-item-' || lpad(g::text, 8, '0'), 'Item ' || g, 'WARM_5M', now() + interval '1 hour'
		FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
	// The frozen recalculation's idle bound, short for the test, long enough that a loaded
	// machine's pause between two of its fetches before the hook does not end it early.
	frozen, err := store.Open(ctx, store.PoolConfig{URL: url, IdleInTransaction: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(frozen.Close)
	for _, what := range []string{"signals", "activity"} {
		t.Run(what, func(t *testing.T) {
			holding, thaw := make(chan struct{}), make(chan struct{})
			recalcReading = func(w string) {
				if w == what {
					close(holding)
					<-thaw
				}
			}
			t.Cleanup(func() { recalcReading = func(string) {} })
			done := make(chan error, 1)
			go func() {
				_, err := RecalculatePopularity(ctx, frozen, testPolicy())
				done <- err
			}()
			select {
			case <-holding:
			case err := <-done:
				t.Fatalf("the recalculation to freeze ended before its first row of %s: %v", what, err)
			}
			recalcReading = func(string) {}
			res, err := RecalculatePopularity(ctx, pool, testPolicy())
			close(thaw)
			if err != nil || res.Skipped || res.Scored != n {
				t.Errorf("recalculation beside one frozen holding its first row of %s: %+v, %v; want every item scored", what, res, err)
			}
			if err := <-done; err == nil {
				t.Errorf("the frozen recalculation went on after its session was ended")
			}
		})
	}
}
