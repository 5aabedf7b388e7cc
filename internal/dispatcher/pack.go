package dispatcher

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/history"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider"
)

// packingState is which endpoints may be packed now, for the whole cluster.
type packingState struct{ listings, sales bool }

// PackingModelNow is how a dispatcher configured with c, whose fetcher asks for auctionLimit
// listings, packs calls now: its settings and the cluster's endpoint switches (packing_state),
// for predicting what a collection costs.
func PackingModelNow(ctx context.Context, q *pgxpool.Pool, c Config, auctionLimit int) (packing.Model, error) {
	m := packing.Model{PackSize: c.PackSize, AuctionLimit: auctionLimit, MaxListings: c.PackMaxListings,
		MaxSales: c.PackMaxSales, Shadow: c.ShadowFraction}
	st, err := readPacking(ctx, q)
	m.Listings, m.Sales = st.listings, st.sales
	return m, err
}

// readPacking reads packing_state; an endpoint without a row is on.
func readPacking(ctx context.Context, q *pgxpool.Pool) (packingState, error) {
	st := packingState{listings: true, sales: true}
	rows, err := ReadPackingStatus(ctx, q)
	for _, r := range rows {
		switch r.Endpoint {
		case provider.EndpointAuction:
			st.listings = r.Enabled
		case provider.EndpointAuctionSold:
			st.sales = r.Enabled
		}
	}
	return st, err
}

// SetPacking switches packed calls on or off for one endpoint, for every instance.
func SetPacking(ctx context.Context, pool *pgxpool.Pool, endpoint string, on bool, reason string) error {
	if endpoint != provider.EndpointAuction && endpoint != provider.EndpointAuctionSold {
		return fmt.Errorf("packing: endpoint %q: allowed %s, %s", endpoint, provider.EndpointAuction, provider.EndpointAuctionSold)
	}
	_, err := pool.Exec(ctx, `
		INSERT INTO packing_state (endpoint, enabled, reason) VALUES ($1, $2, $3)
		ON CONFLICT (endpoint) DO UPDATE SET enabled = EXCLUDED.enabled, reason = EXCLUDED.reason, changed_at = now()`,
		endpoint, on, provider.Clean(reason, provider.MaxErrorRunes))
	if err != nil {
		return fmt.Errorf("set packing for %s: %w", endpoint, err)
	}
	return nil
}

// PackingStatus is one endpoint's packing switch as stored.
type PackingStatus struct {
	Endpoint  string
	Enabled   bool
	ChangedAt time.Time
	Reason    string
}

// ReadPackingStatus lists the endpoints whose switch was ever set (the others are on).
func ReadPackingStatus(ctx context.Context, q *pgxpool.Pool) ([]PackingStatus, error) {
	rows, err := q.Query(ctx, `SELECT endpoint, enabled, changed_at, coalesce(reason, '') FROM packing_state ORDER BY endpoint`)
	if err != nil {
		return nil, fmt.Errorf("read packing state: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PackingStatus])
}

// small reports whether a claim may share a call: its recent answers were small. An item
// never collected is not (nothing is known about it); after one collection only its listings
// are known. Sales per collection are its sales rate times its tier's interval, not an average
// of past collections, so an item the plan moved to a faster tier shares calls at once, as the
// plan counted it (packing.Model.PackedUpTo). Whatever is guessed here, the completeness rule
// decides what is kept. An item whose last collection failed is asked alone: the provider says
// what is wrong with it (an item it no longer knows) only to a call of its own.
func (d *Dispatcher) small(c catalog.Claim) bool {
	if c.SeenListings == nil || c.FailureStreak > 0 {
		return false
	}
	perCollection := 0.0
	if iv, ok := c.Tier.Interval(); ok && c.EstSeconds() > 0 {
		perCollection = c.EstSales / c.EstSeconds() * iv.Seconds()
	}
	return packing.Small(int(*c.SeenListings), perCollection, d.cfg.PackMaxListings, d.cfg.PackMaxSales)
}

// jobsFor groups a batch into fetch jobs: small items in groups of up to PackSize whose
// listings last time add up to at most 3/4 of the listings limit (room for the market to
// grow before the answer is cut), every other item alone.
func (d *Dispatcher) jobsFor(claims []catalog.Claim, st packingState) [][]catalog.Claim {
	var alone, packable []catalog.Claim
	for _, c := range claims {
		if d.packSize > 1 && (st.listings || st.sales) && d.small(c) {
			packable = append(packable, c)
		} else {
			alone = append(alone, c)
		}
	}
	// Items whose newest stored sales are close in time share calls: a full sales answer then
	// still reaches back to each one's stored sales. Items with none stored go last.
	slices.SortStableFunc(packable, func(a, b catalog.Claim) int {
		switch {
		case a.LastSaleAt == nil || b.LastSaleAt == nil:
			return cmp.Compare(boolInt(a.LastSaleAt == nil), boolInt(b.LastSaleAt == nil))
		}
		return b.LastSaleAt.Compare(*a.LastSaleAt)
	})
	jobs := make([][]catalog.Claim, 0, len(alone)+len(packable)/max(d.packSize, 1)+1)
	budget := packing.GroupListings(d.auctionLimit)
	for len(packable) > 0 {
		n, rows := 0, 0
		for n < len(packable) && n < d.packSize && (n == 0 || rows+int(*packable[n].SeenListings) <= budget) {
			rows += int(*packable[n].SeenListings)
			n++
		}
		jobs = append(jobs, packable[:n:n])
		packable = packable[n:]
	}
	for i := range alone {
		jobs = append(jobs, alone[i:i+1])
	}
	return jobs
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fetchPacked collects a group of small items with one call per endpoint, then fetches alone,
// in the same pass, every item whose part of an answer may have been cut. A packed call that
// fails leaves its items to be fetched alone. f is the pass's (ownAnswer).
func (d *Dispatcher) fetchPacked(ctx context.Context, group []catalog.Claim, st packingState, f *flow) []result {
	ids := make([]string, len(group))
	for i, c := range group {
		ids[i] = c.ItemID
	}
	// Shadowed items are fetched alone before the packed call too, so a listing change made
	// between the calls is told apart from a packing fault (verify compares both sides).
	before := map[string][]provider.Listing{}
	for _, c := range group {
		if st.listings && d.shadow() {
			if a, err := d.fetch.Auction(ctx, c.ItemID); err == nil {
				before[c.ItemID] = a.Rows
			}
		}
	}
	var lparts map[string][]provider.Listing
	lok := false
	if st.listings {
		a, err := untilAnswered(ctx, func() (provider.Answer[provider.Listing], error) {
			return d.fetch.AuctionMany(ctx, ids)
		})
		rows, sent := a.Rows, a.Sent
		if err == nil {
			lparts = packing.Split(rows, func(l provider.Listing) string { return l.ItemID }, ids)
			lok = packing.ListingsComplete(sent, d.auctionLimit)
		} else if stops(err) {
			return failAll(group, err, d.clock.now())
		}
	}
	var sparts map[string][]provider.Sale
	var ssent int
	// Sales before newest (when the packed answer was made less shadowSkew, or its newest sale
	// if later) must be in the packed answer: the shadow check compares them.
	var newest time.Time
	sok := false
	// When the packed sales call was answered, by the clock the provider dates sales with
	// (provider.Answer.AnsweredAt): the seconds held back count from it.
	var answeredAt time.Time
	if st.sales {
		sentAt := d.clock.now()
		a, err := untilAnswered(ctx, func() (provider.Answer[provider.Sale], error) {
			return d.fetch.AuctionSoldMany(ctx, ids)
		})
		if err == nil {
			answeredAt = a.AnsweredAt(sentAt)
			d.skew.seen(d.log, answeredAt.Sub(sentAt), time.Now())
			newest = answeredAt.Add(-shadowSkew) // made before the call, whatever the answer holds
			sparts = packing.Split(a.Rows, func(s provider.Sale) string { return s.ItemID }, ids)
			ssent, sok = a.Sent, true
			for _, s := range a.Rows {
				if s.SoldAt.After(newest) {
					newest = s.SoldAt
				}
			}
		} else if stops(err) {
			return failAll(group, err, d.clock.now())
		}
	}

	out := make([]result, len(group))
	for i, c := range group {
		r := result{claim: c, outcome: "ok", window: d.cfg.EstimateWindow}
		listings, lpacked := lparts[c.ItemID], lok
		if lpacked && len(listings) == 0 && c.SeenListings != nil && *c.SeenListings > 0 {
			// It had listings and the packed answer has none: a market emptied since, or an item
			// the provider no longer knows, which a packed answer leaves out without a word.
			// Asked alone, the provider says which.
			lpacked = false
		}
		var err error
		if lpacked {
			r.listings = history.Summarize(listings, false) // complete: the answer was not cut
		} else {
			r.listings, err = d.listingsAlone(ctx, c)
		}
		var sales []history.Sale
		salesAt := answeredAt
		spacked := false
		if err == nil {
			var v packing.SalesVerdict
			if sok {
				v = packing.Sales(ssent, d.soldLimit, saleTimes(sparts[c.ItemID]), c.LastSaleAt)
			}
			if v.Complete {
				part := sparts[c.ItemID]
				if v.DropOldestSecond {
					part = dropOldestSecond(part)
				}
				sales, spacked = history.SequenceSales(part, false, nil), true
			} else {
				sales, r.salesGap, salesAt, err = d.salesAlone(ctx, c)
			}
		}
		r.at = d.clock.now()
		if class := provider.ClassOf(err); err != nil && endsPass(class) && !d.ownAnswer(ctx, f, c, err) {
			// What failed this item's call would fail its pack-mates' alike: they are not
			// called, and go back with the pass.
			out[i] = result{claim: c, at: r.at, err: err, outcome: class.String()}
			for j := i + 1; j < len(group); j++ {
				out[j] = result{claim: group[j], at: r.at, err: err, outcome: class.String(), unasked: true}
			}
			return out
		}
		if err != nil {
			r.err, r.outcome = err, provider.ClassOf(err).String()
			if endsPass(provider.ClassOf(err)) {
				r.outcome = ownOutcome(provider.ClassOf(err)) // judged so just above
			}
			out[i] = r
			continue
		}
		prior, shadowed := before[c.ItemID]
		if (lpacked && shadowed) || (spacked && d.shadow()) {
			lbad, sbad := d.verify(ctx, c, listings, prior, lpacked && shadowed, sales, spacked, newest)
			// A packed answer shown wrong is not written: the item is fetched alone, and so are
			// its pack-mates still to come, whose parts came from the same answer.
			if lbad {
				lpacked, lok = false, false
				r.listings, err = d.listingsAlone(ctx, c)
			}
			if sbad && err == nil {
				spacked, sok = false, false
				sales, r.salesGap, salesAt, err = d.salesAlone(ctx, c)
			}
			if err != nil {
				r.err, r.outcome = err, provider.ClassOf(err).String()
				out[i] = r
				continue
			}
		}
		r.packed = lpacked || spacked
		r.sales = history.NewSales(sales, c.LastSaleAt, c.LastSecondSales, history.Settled(salesAt))
		out[i] = r
	}
	return out
}

// stops reports errors of a packed call that end the pass whatever the item (maintenance, a
// refused key, a rate limit that outlasted the retries: single calls would meet it too). An
// answer that is not the API's (provider.ClassEndpoint) does not: a proxy may refuse the longer
// itemIds URL while single calls pass, so the items are fetched alone and those calls decide.
func stops(err error) bool {
	c := provider.ClassOf(err)
	return c == provider.ClassMaintenance || c == provider.ClassConfig || c == provider.ClassRateLimited
}

// shadowSkew is how long before the packed answer was made a sale must be dated to have been
// made before the call was sent, and so be in its answer: room for the call's own time, and
// for a provider whose answers carry no Date and whose clock trails ours.
const shadowSkew = time.Minute

// failAll fails a group whose packed call drew err: the answer is the call's, not one item's
// (no ownAnswer for it).
func failAll(group []catalog.Claim, err error, at time.Time) []result {
	out := make([]result, len(group))
	for i, c := range group {
		out[i] = result{claim: c, at: at, err: err, outcome: provider.ClassOf(err).String()}
	}
	return out
}

func saleTimes(rows []provider.Sale) []time.Time {
	out := make([]time.Time, len(rows))
	for i, r := range rows {
		out[i] = r.SoldAt
	}
	return out
}

// dropOldestSecond removes the rows of the oldest second of a newest-first part: a cut may
// have taken some of that second's sales, and positions within a second are their keys.
func dropOldestSecond(rows []provider.Sale) []provider.Sale {
	if len(rows) == 0 {
		return rows
	}
	oldest := rows[len(rows)-1].SoldAt.Truncate(time.Second)
	n := len(rows)
	for n > 0 && rows[n-1].SoldAt.Truncate(time.Second).Equal(oldest) {
		n--
	}
	return rows[:n]
}

func (d *Dispatcher) shadow() bool {
	return d.cfg.ShadowFraction > 0 && rand.Float64() < d.cfg.ShadowFraction
}

// verify fetches a packed item alone and compares, and says which endpoint's part was wrong; a
// mismatch switches packing off for that endpoint for the whole cluster, with one error line
// naming the item. Listings count as a
// mismatch only when the single-item answers before and after the packed call agree (a
// market that moved in between proves nothing either way), and the packed part lacks one of
// their listings: one more in the packed part is a listing made and bought between the calls.
func (d *Dispatcher) verify(ctx context.Context, c catalog.Claim, listings, prior []provider.Listing, lpacked bool, sales []history.Sale, spacked bool, upTo time.Time) (lbad, sbad bool) {
	if lpacked {
		a, err := d.fetch.Auction(ctx, c.ItemID)
		if alone := a.Rows; err == nil && sameListings(prior, alone) {
			lbad = lacksAny(listings, alone)
			d.cfg.Observer.Shadowed(provider.EndpointAuction, lbad)
			if lbad {
				d.packingMismatch(ctx, provider.EndpointAuction, c.ItemID, fmt.Sprintf("%d listings packed, %d alone", len(listings), len(alone)))
			}
		}
	}
	if spacked {
		a, err := d.fetch.AuctionSold(ctx, c.ItemID)
		if err == nil {
			sbad = !sameSales(sales, history.SequenceSales(a.Rows, full(a.Sent, d.soldLimit), c.LastSaleAt), c.LastSaleAt, upTo)
			d.cfg.Observer.Shadowed(provider.EndpointAuctionSold, sbad)
			if sbad {
				d.packingMismatch(ctx, provider.EndpointAuctionSold, c.ItemID, "new sales differ between the packed and the single-item answer")
			}
		}
	}
	return lbad, sbad
}

func (d *Dispatcher) packingMismatch(ctx context.Context, endpoint, itemID, what string) {
	reason := fmt.Sprintf("shadow verification of item %s: %s", itemID, what)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err := SetPacking(sctx, d.pool, endpoint, false, reason)
	cancel()
	d.log.Error("packed answer differs from the single-item answer: packing switched off cluster-wide until an operator turns it back on",
		zap.String("endpoint", endpoint), zap.String("item_id", itemID), zap.String("difference", what), zap.Error(err))
}

// lacksAny says whether packed lacks a listing of alone, by auction number.
func lacksAny(packed, alone []provider.Listing) bool {
	have := make(map[int64]bool, len(packed))
	for _, l := range packed {
		have[l.AuctionNo] = true
	}
	for _, l := range alone {
		if !have[l.AuctionNo] {
			return true
		}
	}
	return false
}

// sameListings compares two answers for one item by auction number.
func sameListings(a, b []provider.Listing) bool {
	if len(a) != len(b) {
		return false
	}
	x := make([]int64, len(a))
	y := make([]int64, len(b))
	for i := range a {
		x[i], y[i] = a[i].AuctionNo, b[i].AuctionNo
	}
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// sameSales compares the sales of two answers newer than the stored one (its own second may
// have been trimmed from a packed part) and older than the second of the packed answer's
// newest sale: a sale made between the two calls can still fall in that second.
func sameSales(packed, alone []history.Sale, lastStored *time.Time, upTo time.Time) bool {
	cut := upTo.Truncate(time.Second)
	keep := func(rows []history.Sale) []history.Sale {
		return slices.DeleteFunc(slices.Clone(rows), func(s history.Sale) bool {
			return !s.SoldAt.Before(cut) || (lastStored != nil && !s.SoldAt.After(*lastStored))
		})
	}
	return slices.Equal(keep(packed), keep(alone))
}
