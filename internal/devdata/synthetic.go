// Package devdata writes data for development and demos, never for production: synthetic
// fixtures (items with ids seed-NNNN, their hourly snapshots, sales and interest, from a
// deterministic market generator), purge:synthetic, which deletes every fixture row, and the
// seed:real workflow that fills a database from the real provider. What counts as synthetic is
// decided once, by the schema's synthetic_item(item_id).
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
		if err := db.QueryRow(ctx, "SELECT date_trunc('hour', now(), 'UTC')").Scan(&end); err != nil {
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

// fixtureRows holds generated rows column by column, in the types their owners write.
type fixtureRows struct {
	items    catalog.FixtureItems
	snaps    history.SnapshotRows
	sales    history.SaleRows
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
				seq = fx.sales.Seq[len(fx.sales.Seq)-1] + 1
			}
			qty := int64(1 + r.IntN(10))
			unit := int64(math.Max(1, math.Round(p*(1+0.03*r.NormFloat64()))))
			at := h.Add(time.Duration(s) * time.Second)
			fx.sales.ItemIDs = append(fx.sales.ItemIDs, id)
			fx.sales.At = append(fx.sales.At, at)
			fx.sales.Seq = append(fx.sales.Seq, seq)
			fx.sales.Qty = append(fx.sales.Qty, qty)
			fx.sales.Unit = append(fx.sales.Unit, unit)
			fx.sales.Total = append(fx.sales.Total, unit*qty)
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
		fx.snaps.ItemIDs = append(fx.snaps.ItemIDs, id)
		fx.snaps.ClaimTokens = append(fx.snaps.ClaimTokens, fixtureUUID(id, at))
		fx.snaps.Tiers = append(fx.snaps.Tiers, string(tiers.Warm))
		fx.snaps.At = append(fx.snaps.At, at)
		fx.snaps.Count = append(fx.snaps.Count, count)
		fx.snaps.Qty = append(fx.snaps.Qty, int64(count)*int64(1+r.IntN(20)))
		fx.snaps.Lowest = append(fx.snaps.Lowest, int64(math.Round(p*0.96)))
		fx.snaps.Median = append(fx.snaps.Median, int64(math.Round(p*1.01)))
		fx.snaps.Weighted = append(fx.snaps.Weighted, p*1.005)
		fx.snaps.APIAverage = append(fx.snaps.APIAverage, int64(math.Round(p)))
		fx.snaps.SalesCount = append(fx.snaps.SalesCount, int32(k))
		fx.snaps.SalesQty = append(fx.snaps.SalesQty, qtySum)
		vwap := math.NaN()
		if qtySum > 0 {
			vwap = float64(goldSum) / float64(qtySum)
		}
		fx.snaps.SalesVWAP = append(fx.snaps.SalesVWAP, vwap)
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
	for i := len(fx.snaps.Tiers) - hours; i < len(fx.snaps.Tiers); i++ {
		fx.snaps.Tiers[i] = string(tier)
	}
	fx.items.IDs = append(fx.items.IDs, id)
	fx.items.Names = append(fx.items.Names, fmt.Sprintf("[synthetic] %s %04d", syntheticNames[n%len(syntheticNames)], n))
	fx.items.Tiers = append(fx.items.Tiers, string(tier))
	fx.items.Reasons = append(fx.items.Reasons, "seed:synthetic fixture, never collected; "+reason)
	fx.items.Scores = append(fx.items.Scores, score)
	fx.items.Created = append(fx.items.Created, start)
	fx.items.LastCollected = append(fx.items.LastCollected, lastSnap)
}

func (fx *fixtureRows) insert(ctx context.Context, tx pgx.Tx, res *SyntheticResult) error {
	items, err := catalog.InsertFixtureItems(ctx, tx, fx.items)
	if err != nil {
		return err
	}
	snaps, err := history.InsertSnapshotRows(ctx, tx, fx.snaps)
	if err != nil {
		return err
	}
	sales, err := history.InsertSaleRows(ctx, tx, fx.sales)
	if err != nil {
		return err
	}
	// The write-back keeps candles in step with the rows it writes; these rows came another way.
	if err := history.RebuildCandles(ctx, tx, uniq(fx.snaps.ItemIDs)); err != nil {
		return fmt.Errorf("synthetic items: %w", err)
	}
	views, err := catalog.InsertViews(ctx, tx, fx.interest.ids, fx.interest.at, syntheticSource)
	if err != nil {
		return err
	}
	res.Inserted += int(items)
	res.Snapshots += snaps
	res.Sales += sales
	res.Interest += views
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
