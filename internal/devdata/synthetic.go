// Package devdata writes data for development and demos, never for production: synthetic
// fixtures (items with ids seed-NNNN, their hourly snapshots, sales and interest, from a
// deterministic market generator), purge:synthetic, which deletes every fixture row, and the
// seed:real workflow that fills a database from the real provider. What counts as synthetic is
// decided once, by catalog.IsSynthetic.
package devdata

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/tiers"
)

// SyntheticOptions sizes seed:synthetic.
type SyntheticOptions struct {
	Items int // default 20
	Days  int // hours of history per item = 24 × Days; default 7
	// Until ends the history; zero means the current hour of the database clock. It is
	// truncated to the hour, which is what makes a re-run line up with the first run.
	Until time.Time
	// Policy scores the generated history into a plausible tier; zero = the defaults.
	Policy catalog.Policy
	// Progress, when set, hears after each committed batch how many items are written.
	Progress func(done, total int)
}

// Synthetic limits: ids run from seed-0001 to seed-1000000.
const (
	MaxSyntheticItems = 1_000_000
	MaxSyntheticDays  = 90
)

// syntheticBatchRows bounds the snapshots one transaction writes, so no transaction runs for
// long and other connections see the fixtures appear as they are written.
const syntheticBatchRows = 10_000

// SyntheticResult counts what seed:synthetic inserted (0 everywhere on a repeat run).
type SyntheticResult struct {
	Items     int // synthetic items asked for
	Inserted  int // new tracked_items rows
	Snapshots int64
	Sales     int64
	Interest  int64
}

// syntheticSource marks interest events written by seed:synthetic.
const syntheticSource = "seed:synthetic"

var syntheticNames = []string{
	"무색 큐브 조각", "골드 주머니", "강렬한 빛의 결정체", "순수한 황금 증폭서",
	"황금 큐브 조각", "망각의 꽃", "빛나는 진주", "정제된 혼돈의 결정",
}

// SeedSynthetic writes Items fixture items (ids seed-0001 …) with hourly snapshots and
// sales over the past Days days, in batches of items that each commit on their own (an
// interrupted run keeps what it wrote, and running it again completes it). Every value is a function of the item id and the hour, and
// the hours sit on a grid anchored to the database clock, so re-running adds nothing but the
// hours that passed since. Fixtures are never scheduled (next_collect_at NULL): there is no
// such item at the provider to collect.
func SeedSynthetic(ctx context.Context, db catalog.DB, opt SyntheticOptions) (SyntheticResult, error) {
	if opt.Items <= 0 {
		opt.Items = 20
	}
	if opt.Days <= 0 {
		opt.Days = 7
	}
	if opt.Items > MaxSyntheticItems || opt.Days > MaxSyntheticDays {
		return SyntheticResult{}, fmt.Errorf("seed:synthetic: at most %d items and %d days (asked %d items, %d days)",
			MaxSyntheticItems, MaxSyntheticDays, opt.Items, opt.Days)
	}
	if opt.Policy.Window == 0 {
		opt.Policy = catalog.PolicyFromConfig(config.Default().Catalog, budget.ConfiguredPlanLimit(config.Default()), packing.Model{})
	}
	res := SyntheticResult{Items: opt.Items}
	end := opt.Until.Truncate(time.Hour)
	if opt.Until.IsZero() {
		if err := db.QueryRow(ctx, "SELECT date_trunc('hour', now())").Scan(&end); err != nil {
			return res, fmt.Errorf("seed:synthetic: read the database clock: %w", err)
		}
	}
	perBatch := max(1, syntheticBatchRows/(24*opt.Days))
	for lo := 1; lo <= opt.Items; lo += perBatch {
		hi := min(lo+perBatch-1, opt.Items)
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var fx fixtureRows
			for i := lo; i <= hi; i++ {
				fx.addItem(fmt.Sprintf("%s%04d", catalog.SyntheticPrefix, i), i, end, opt)
			}
			return fx.insert(ctx, tx, &res)
		})
		if err != nil {
			return res, fmt.Errorf("seed:synthetic: items %d to %d: %w", lo, hi, err)
		}
		if opt.Progress != nil {
			opt.Progress(hi, opt.Items)
		}
	}
	return res, nil
}

// fixtureRows holds generated rows column by column, ready for unnest.
type fixtureRows struct {
	items struct {
		ids, names, tiers, reasons []string
		scores                     []float64
		created, lastCollected     []time.Time
	}
	snaps struct {
		ids, tokens, tiers                 []string
		at                                 []time.Time
		count, salesCount                  []int32
		qty, lowest, median, avg, salesQty []int64
		weighted, vwap                     []float64
	}
	sales struct {
		ids              []string
		at               []time.Time
		seq              []int32
		qty, unit, total []int64
	}
	interest struct {
		ids []string
		at  []time.Time
	}
}

// itemModel is the deterministic shape of one fixture's market.
type itemModel struct {
	basePrice    float64
	salesPerHour float64
	listings     float64
	offset       time.Duration // minute of the hour its snapshot is taken
	phase        float64
}

func modelFor(id string) itemModel {
	r := rand.New(rand.NewPCG(hash64(id), 0x5eed))
	return itemModel{
		basePrice:    math.Pow(10, 2+5*r.Float64()), // 100 to 10 million gold
		salesPerHour: 0.1 * math.Pow(10, 2.6*r.Float64()),
		listings:     5 + 200*r.Float64(),
		offset:       time.Duration(r.IntN(3600)) * time.Second,
		phase:        2 * math.Pi * r.Float64(),
	}
}

// price is a daily and a weekly swing around the base price.
func (m itemModel) price(t time.Time) float64 {
	h := float64(t.Unix()) / 3600
	return m.basePrice * (1 + 0.08*math.Sin(2*math.Pi*h/24+m.phase) + 0.04*math.Sin(2*math.Pi*h/168+m.phase))
}

func (fx *fixtureRows) addItem(id string, n int, end time.Time, opt SyntheticOptions) {
	m := modelFor(id)
	hours := 24 * opt.Days
	start := end.Add(-time.Duration(hours) * time.Hour)
	var sig catalog.Signals
	var lastSnap time.Time
	for h := start; h.Before(end); h = h.Add(time.Hour) {
		r := rand.New(rand.NewPCG(hash64(id), uint64(h.Unix())))
		p := m.price(h)

		// Sales of this hour, on whole seconds; seq numbers sales that share a second.
		k := poisson(r, m.salesPerHour)
		secs := make([]int, k)
		for j := range secs {
			secs[j] = r.IntN(3600)
		}
		sort.Ints(secs)
		var qtySum, goldSum int64
		for j, s := range secs {
			seq := int32(0)
			if j > 0 && secs[j-1] == s {
				seq = fx.sales.seq[len(fx.sales.seq)-1] + 1
			}
			qty := int64(1 + r.IntN(10))
			unit := int64(math.Max(1, math.Round(p*(1+0.03*r.NormFloat64()))))
			at := h.Add(time.Duration(s) * time.Second)
			fx.sales.ids = append(fx.sales.ids, id)
			fx.sales.at = append(fx.sales.at, at)
			fx.sales.seq = append(fx.sales.seq, seq)
			fx.sales.qty = append(fx.sales.qty, qty)
			fx.sales.unit = append(fx.sales.unit, unit)
			fx.sales.total = append(fx.sales.total, unit*qty)
			qtySum += qty
			goldSum += unit * qty
			if end.Sub(at) <= opt.Policy.Window {
				sig.Sales++
				sig.Gold += float64(unit * qty)
			}
		}

		count := int32(math.Max(1, math.Round(m.listings*(1+0.2*math.Sin(float64(h.Unix())/7200+m.phase))+r.NormFloat64()*3)))
		at := h.Add(m.offset)
		lastSnap = at
		fx.snaps.ids = append(fx.snaps.ids, id)
		fx.snaps.tokens = append(fx.snaps.tokens, fixtureUUID(id, at))
		fx.snaps.tiers = append(fx.snaps.tiers, string(tiers.Warm))
		fx.snaps.at = append(fx.snaps.at, at)
		fx.snaps.count = append(fx.snaps.count, count)
		fx.snaps.qty = append(fx.snaps.qty, int64(count)*int64(1+r.IntN(20)))
		fx.snaps.lowest = append(fx.snaps.lowest, int64(math.Round(p*0.96)))
		fx.snaps.median = append(fx.snaps.median, int64(math.Round(p*1.01)))
		fx.snaps.weighted = append(fx.snaps.weighted, p*1.005)
		fx.snaps.avg = append(fx.snaps.avg, int64(math.Round(p)))
		fx.snaps.salesCount = append(fx.snaps.salesCount, int32(k))
		fx.snaps.salesQty = append(fx.snaps.salesQty, qtySum)
		vwap := math.NaN()
		if qtySum > 0 {
			vwap = float64(goldSum) / float64(qtySum)
		}
		fx.snaps.vwap = append(fx.snaps.vwap, vwap)
	}
	// A third of the fixtures were looked at recently, so screens show interest too.
	if n%3 == 0 {
		for _, ago := range []time.Duration{2 * time.Hour, 5 * time.Hour, 20 * time.Hour} {
			fx.interest.ids = append(fx.interest.ids, id)
			fx.interest.at = append(fx.interest.at, end.Add(-ago))
			sig.Interest += opt.Policy.Weights.View * math.Pow(0.5, ago.Seconds()/opt.Policy.InterestHalfLife.Seconds())
		}
	}
	score := catalog.Score(sig, opt.Policy.Weights, opt.Policy.Window)
	tier, reason := tiers.ForScore(score, opt.Policy.Thresholds)
	for i := len(fx.snaps.tiers) - hours; i < len(fx.snaps.tiers); i++ {
		fx.snaps.tiers[i] = string(tier)
	}
	fx.items.ids = append(fx.items.ids, id)
	fx.items.names = append(fx.items.names, fmt.Sprintf("[synthetic] %s %04d", syntheticNames[n%len(syntheticNames)], n))
	fx.items.tiers = append(fx.items.tiers, string(tier))
	fx.items.reasons = append(fx.items.reasons, "seed:synthetic fixture, never collected; "+reason)
	fx.items.scores = append(fx.items.scores, score)
	fx.items.created = append(fx.items.created, start)
	fx.items.lastCollected = append(fx.items.lastCollected, lastSnap)
}

// insertChunk bounds each statement's arrays.
const insertChunk = 5000

func (fx *fixtureRows) insert(ctx context.Context, tx pgx.Tx, res *SyntheticResult) error {
	it := fx.items
	tag, err := tx.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at, popularity_score,
		                           tier_changed_at, tier_reason, created_at, last_collected_at)
		SELECT u.id, u.name, u.tier, NULL, u.score, u.created, u.reason, u.created, u.last
		FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[], $6::timestamptz[], $7::timestamptz[])
		     AS u(id, name, tier, score, reason, created, last)
		ON CONFLICT (item_id) DO NOTHING`,
		it.ids, it.names, it.tiers, it.scores, it.reasons, it.created, it.lastCollected)
	if err != nil {
		return fmt.Errorf("insert synthetic tracked items: %w", err)
	}
	res.Inserted += int(tag.RowsAffected())

	s := fx.snaps
	for lo := 0; lo < len(s.ids); lo += insertChunk {
		hi := min(lo+insertChunk, len(s.ids))
		tag, err := tx.Exec(ctx, `
			INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, listing_count, listing_quantity,
			       lowest_unit_price, median_unit_price, weighted_unit_price, api_average_price,
			       sales_count, sales_quantity, sales_vwap)
			SELECT u.id, u.token::uuid, u.at, u.tier, u.cnt, u.qty, u.lowest, u.median, u.weighted, u.avg,
			       u.scount, u.sqty, CASE WHEN u.vwap = 'NaN' THEN NULL ELSE u.vwap END
			FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::int[], $6::bigint[], $7::bigint[],
			            $8::bigint[], $9::float8[], $10::bigint[], $11::int[], $12::bigint[], $13::float8[])
			     AS u(id, token, at, tier, cnt, qty, lowest, median, weighted, avg, scount, sqty, vwap)
			ON CONFLICT (claim_token, collected_at) DO NOTHING`,
			s.ids[lo:hi], s.tokens[lo:hi], s.at[lo:hi], s.tiers[lo:hi], s.count[lo:hi], s.qty[lo:hi], s.lowest[lo:hi],
			s.median[lo:hi], s.weighted[lo:hi], s.avg[lo:hi], s.salesCount[lo:hi], s.salesQty[lo:hi], s.vwap[lo:hi])
		if err != nil {
			return fmt.Errorf("insert synthetic snapshots: %w", err)
		}
		res.Snapshots += tag.RowsAffected()
	}

	sa := fx.sales
	for lo := 0; lo < len(sa.ids); lo += insertChunk {
		hi := min(lo+insertChunk, len(sa.ids))
		tag, err := tx.Exec(ctx, `
			INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price, first_seen_at)
			SELECT u.id, u.at, u.seq, u.qty, u.unit, u.total, u.at
			FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[])
			     AS u(id, at, seq, qty, unit, total)
			ON CONFLICT (item_id, sold_at, seq) DO NOTHING`,
			sa.ids[lo:hi], sa.at[lo:hi], sa.seq[lo:hi], sa.qty[lo:hi], sa.unit[lo:hi], sa.total[lo:hi])
		if err != nil {
			return fmt.Errorf("insert synthetic sales: %w", err)
		}
		res.Sales += tag.RowsAffected()
	}
	// The write-back keeps candles in step with the rows it writes; these rows came another way.
	if err := history.RebuildCandles(ctx, tx, uniq(s.ids)); err != nil {
		return fmt.Errorf("synthetic items: %w", err)
	}

	// item_interest has no natural key: an event already there (same item, time, source)
	// is not written again.
	tag, err = tx.Exec(ctx, `
		INSERT INTO item_interest (item_id, kind, weight, occurred_at, source)
		SELECT u.id, 'view', 1, u.at, $3
		FROM unnest($1::text[], $2::timestamptz[]) AS u(id, at)
		WHERE NOT EXISTS (SELECT 1 FROM item_interest i
		                  WHERE i.item_id = u.id AND i.occurred_at = u.at AND i.source = $3)`,
		fx.interest.ids, fx.interest.at, syntheticSource)
	if err != nil {
		return fmt.Errorf("insert synthetic interest: %w", err)
	}
	res.Interest += tag.RowsAffected()
	return nil
}

// poisson draws a Poisson count (Knuth; fine for the small rates used here).
func poisson(r *rand.Rand, lambda float64) int {
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= r.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// fixtureUUID is a name-based (version 5 style) UUID for a fixture snapshot's claim token,
// so the same snapshot always gets the same token and a re-run cannot insert it twice.
func fixtureUUID(id string, at time.Time) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(at.Unix()))
	sum := sha1.Sum(append([]byte(id+"|"), b[:]...))
	sum[6] = (sum[6] & 0x0f) | 0x50
	sum[8] = (sum[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
}

func uniq(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
