package tierplan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/tiers"
)

func TestPredictByTierAddsUpToPredict(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	all := tiers.All()
	for trial := 0; trial < 200; trial++ {
		items := randomCatalog(r, 1+r.IntN(2000))
		assigned := make([]tiers.Tier, len(items))
		for i := range assigned {
			assigned[i] = all[r.IntN(len(all))]
			if r.IntN(10) == 0 {
				items[i].Weight = 0
			}
		}
		demand, fresh := Predict(items, assigned)
		fs := PredictByTier(items, assigned)
		n, rank := 0, -1
		for _, tf := range fs {
			if tf.Tier.Rank() <= rank {
				t.Fatalf("trial %d: tiers out of order at %s", trial, tf.Tier)
			}
			rank = tf.Tier.Rank()
			if tf.Items == 0 || tf.Freshness < 0 || tf.Freshness > 1 {
				t.Fatalf("trial %d: tier %+v", trial, tf)
			}
			n += tf.Items
		}
		d, f := Overall(fs)
		if n != len(items) || math.Abs(d-demand) > 1e-9*(1+demand) || math.Abs(f-fresh) > 1e-9 {
			t.Fatalf("trial %d: tiers give %d items, demand %v, freshness %v; Predict %d, %v, %v", trial, n, d, f, len(items), demand, fresh)
		}
	}
}

func TestPredictByTierSaysHowFreshEachTierIs(t *testing.T) {
	// λI = 1 at HOT_1M and at COLD_10M; the weightless COLD items' plain mean still shows.
	items := []Item{
		{Weight: 3, ChangeRate: 1.0 / 60, Requests: 2},
		{Weight: 1, ChangeRate: 0, Requests: 2},
		{Weight: 0, ChangeRate: 1.0 / 600, Requests: 2},
		{Weight: 0, ChangeRate: 0, Requests: 2},
	}
	got := PredictByTier(items, []tiers.Tier{tiers.Hot, tiers.Hot, tiers.Cold, tiers.Cold})
	f := 1 - math.Exp(-1)
	want := []TierForecast{
		{Tier: tiers.Hot, Items: 2, Demand: 4.0 / 60, Weight: 4, Freshness: (3*f + 1) / 4},
		{Tier: tiers.Cold, Items: 2, Demand: 4.0 / 600, Weight: 0, Freshness: (f + 1) / 2},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, o := Overall(got[1:]); math.Abs(o-want[1].Freshness) > 1e-12 {
		t.Errorf("weightless tiers together: freshness %v, want their items' plain mean %v", o, want[1].Freshness)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Tier != w.Tier || g.Items != w.Items || math.Abs(g.Demand-w.Demand) > 1e-12 || g.Weight != w.Weight || math.Abs(g.Freshness-w.Freshness) > 1e-12 {
			t.Errorf("tier %d: got %+v, want %+v", i, g, w)
		}
	}
}

func TestForecastOfTheBudgetPlanIsThePlansPrediction(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	items := make([]State, 3000)
	scores := make([]float64, len(items))
	ds := make([]Decision, len(items))
	listings := 3
	for i := range items {
		items[i] = State{Tier: Choices[r.IntN(len(Choices))]}
		if r.IntN(3) > 0 { // observed: changes in a random share of 100 five-minute intervals
			ch := float64(1 + r.IntN(99))
			items[i].Observed = Observations{Accesses: 100, Changes: ch, ChangedSeconds: ch * 300, UnchangedSeconds: (100 - ch) * 300}
			items[i].ObservedSales = r.Float64() * 100
			items[i].SeenListings = &listings
		}
		scores[i] = math.Exp(r.NormFloat64())
		ds[i] = Decision{Tier: items[i].Tier}
		switch r.IntN(20) {
		case 0:
			items[i].Pinned, ds[i] = tiers.Hot, Decision{Tier: tiers.Hot}
		case 1:
			ds[i] = Decision{Tier: tiers.Dormant}
		}
	}
	m := packing.Model{}
	s := ApplyBudget(items, scores, ds, limitOf(10, 600, 0.1), m)
	fs := Forecast(items, scores, ds, s.Prior, m)
	n := 0
	for _, tf := range fs {
		if tf.Tier == tiers.Dormant {
			t.Fatalf("DORMANT is forecast: %+v", tf)
		}
		n += tf.Items
	}
	d, f := Overall(fs)
	if n != s.Items || math.Abs(d-s.DemandAfter) > 1e-9*(1+d) || math.Abs(f-s.FreshnessAfter) > 1e-9 {
		t.Fatalf("forecast: %d items, demand %v, freshness %v; the plan: %d, %v, %v", n, d, f, s.Items, s.DemandAfter, s.FreshnessAfter)
	}
}
