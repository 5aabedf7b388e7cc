package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/daemon"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// pageData is what every page template gets; Body is the page's own view.
type pageData struct {
	Title    string
	Nav      string
	Message  string
	Actions  bool   // credentials are configured
	LoggedIn bool   // … and this browser is logged in
	User     string // the logged-in user
	CSRF     string // the session's token, for action forms
	Back     string // this page's path, where an action returns
	Body     any
}

// page wraps a handler that fills pageData and names its template.
func (c *Console) page(fn func(r *http.Request, d *pageData) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		d := pageData{Actions: c.actionsEnabled(), Back: r.URL.RequestURI()}
		if ss, _, ok := c.sessionOf(r); ok {
			d.LoggedIn, d.User, d.CSRF = true, ss.user, ss.csrf
		}
		name, err := fn(r, &d)
		if err != nil {
			code := http.StatusInternalServerError
			var he httpError
			switch {
			case errors.As(err, &he):
				code = he.code
			case errors.Is(err, errNotFound):
				code = http.StatusNotFound
			case r.Context().Err() != nil:
				return
			default:
				c.log.Warn("console: page failed", zap.String("path", r.URL.Path), zap.Error(err))
			}
			// The session's user and token too: the layout's logout form carries them, and without
			// the token logging out from an error page was refused, the session left live.
			c.render(w, code, "error", pageData{Title: http.StatusText(code), Message: err.Error(), Actions: d.Actions,
				LoggedIn: d.LoggedIn, User: d.User, CSRF: d.CSRF})
			return
		}
		c.render(w, http.StatusOK, name, d)
	}
}

// render answers code with the page: headers first, as WriteHeader sends them.
func (c *Console) render(w http.ResponseWriter, code int, name string, d pageData) {
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "page", d); err != nil {
		c.log.Error("console: render", zap.String("template", name), zap.Error(err))
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

// Overview --------------------------------------------------------------------------------------

type overviewView struct {
	ReadAt   time.Time
	Err      string
	Provider providerView
	// WriteRefused is why the database refuses writes ("" while it takes them), WriteDetail
	// its words.
	WriteRefused, WriteDetail string
	// Reads says where the item pages read from, when a replica is configured ("" otherwise);
	// ReadsOnReplica whether it serves them now.
	Reads          string
	ReadsOnReplica bool
	Tiers          []tierView
	Total          tierView
	Keys           []keyView
	LagN           int64
	LagP50         time.Duration
	LagP99         time.Duration
	LagWindow      time.Duration
	Leased         int64
	LastCollected  string
	OldestDue      string
	Outbox         outboxView
	Events         string // published through the outbox, or off (outbox.enabled)
	Relay          []string
	RelayStops     []outbox.RelayStop
	LanesHeld      int
	Lanes          int
	Packing        []packingView
	Instances      []instanceView
	History        string
	// PlannedAt is when the tier plan whose forecast the tiers show was made ("" before any).
	PlannedAt string
}

type providerView struct {
	Name, Status, Reason, Since, Automatic string
	Override, Dispatching                  bool
	Probe                                  string
	Cooldowns                              []string
	Transitions                            []string // newest first
}

type tierView struct {
	Tier                string
	Items, Due, Overdue int64
	Lag                 string // due → claim p50 / p99 over the lag window
	Demand              float64
	Share               float64 // of the budget
	Interval            string
	// Freshness is the last stored plan's predicted weighted freshness ("—" without one), and
	// FreshnessNote what it was predicted for.
	Freshness, FreshnessNote string
}

type keyView struct {
	Key                      string
	Configured, Learned, Use float64
	Instances                int
	Sent                     int64
	Note                     string
}

type outboxView struct {
	Pending, Failed int64
	Oldest          time.Duration
}

type packingView struct {
	Endpoint, State string
	On              bool
}

type instanceView struct {
	Instance, Host, Key, Up, Heartbeat string
	PID                                int
	Share                              float64
	Sent                               int64
}

func (c *Console) overviewPage(r *http.Request, d *pageData) (string, error) {
	ov, err := c.current(r.Context())
	if err != nil {
		return "", err
	}
	d.Title, d.Nav, d.Body = "Overview", "overview", c.overviewView(ov)
	return "overview", nil
}

// overviewPart is the overview's body alone, which the page fetches to refresh itself.
func (c *Console) overviewPart(r *http.Request, d *pageData) (string, error) {
	ov, err := c.current(r.Context())
	if err != nil {
		return "", err
	}
	d.Body = c.overviewView(ov)
	return "overview.part", nil
}

func (c *Console) overviewView(ov overview) overviewView {
	st := ov.Status
	now := st.DatabaseNow
	eff, reason, since := st.Provider.Effective()
	v := overviewView{ReadAt: ov.ReadAt, Err: ov.Err, LagN: st.LagN, LagP50: st.LagP50.Round(time.Millisecond),
		LagP99: st.LagP99.Round(time.Millisecond), LagWindow: daemon.LagWindow, Leased: st.Leased,
		Outbox: outboxView{Pending: st.OutboxBacklog, Failed: st.OutboxFailed, Oldest: st.OutboxOldest.Round(time.Second)},
		Events: st.Events(),
		Relay:  st.Relay.Owners, RelayStops: st.Relay.Stops, LanesHeld: st.Relay.LanesHeld, Lanes: outbox.Lanes,
		History: history.SizeText(st.History.Bytes()), WriteRefused: string(st.WriteRefused), WriteDetail: st.WriteDetail,
		Provider: providerView{Name: st.Provider.Provider, Status: string(eff), Reason: reason,
			Since: ago(now, since), Override: st.Provider.OverrideStatus != "", Automatic: string(st.Provider.Status),
			Dispatching: eff.CanDispatch()},
	}
	if c.cfg.Reads != nil {
		v.Reads, v.ReadsOnReplica = readsText(c.cfg.Reads.State())
	}
	if st.Probe != nil && !eff.CanDispatch() {
		v.Provider.Probe = "probe: " + st.Probe.Describe(now)
	}
	for _, tr := range ov.Transitions {
		line := ago(now, tr.At) + ": "
		switch tr.Kind {
		case "override cleared":
			line += "manual override cleared"
		case "override":
			line += "manual override " + string(tr.Status) + ": " + tr.Reason
		default:
			line += string(tr.Status) + ": " + tr.Reason
		}
		v.Provider.Transitions = append(v.Provider.Transitions, line)
	}
	for _, cd := range st.Cooldowns {
		v.Provider.Cooldowns = append(v.Provider.Cooldowns, fmt.Sprintf("key %s cooling down for %s: %s", cd.KeyLabel,
			max(cd.Until.Sub(now), 0).Round(time.Second), cd.Reason))
	}
	m := c.cfg.Market
	configured := budget.KeyRate(m, 1)
	keyRate := budget.KeyRate(m, ov.Learned)
	var forecast []tierplan.TierForecast
	for _, t := range st.Tiers {
		tv := tierView{Tier: t.Tier, Items: t.Items, Due: t.Due, Overdue: t.Overdue, Demand: tierplan.TierDemand(tiers.Tier(t.Tier), t.Requests), Lag: "-"}
		if t.Lag.N > 0 {
			tv.Lag = fmt.Sprintf("%s / %s (%d)", t.Lag.P50.Round(time.Millisecond), t.Lag.P99.Round(time.Millisecond), t.Lag.N)
		}
		if iv, ok := tiers.Tier(t.Tier).Interval(); ok {
			tv.Interval = iv.String()
		} else {
			tv.Interval = "not collected"
		}
		tv.Share = ratio(tv.Demand, keyRate)
		tv.Freshness = noForecast
		if f := t.Forecast; f != nil {
			tv.Freshness = freshText(f.Freshness)
			tv.FreshnessNote = fmt.Sprintf("predicted for the %d items planned here, asking %.2f req/s", f.Items, f.Demand)
			forecast = append(forecast, f.TierForecast)
		}
		v.Tiers = append(v.Tiers, tv)
		v.Total.Items, v.Total.Due, v.Total.Overdue, v.Total.Demand = v.Total.Items+t.Items, v.Total.Due+t.Due, v.Total.Overdue+t.Overdue, v.Total.Demand+tv.Demand
	}
	v.Total.Tier, v.Total.Share, v.Total.Freshness = "total", ratio(v.Total.Demand, keyRate), noForecast
	if len(forecast) > 0 {
		_, fresh := tierplan.Overall(forecast)
		v.Total.Freshness = freshText(fresh)
		v.Total.FreshnessNote = "the planned tiers together, weighted by popularity"
		v.PlannedAt = fmt.Sprintf("%s UTC (%s)", st.PlannedAt.UTC().Format("2006-01-02 15:04:05"), ago(now, st.PlannedAt))
	}
	if len(st.Budgets) == 0 {
		v.Keys = append(v.Keys, keyView{Key: "market", Configured: configured, Learned: keyRate, Note: "no live instance"})
	}
	for _, b := range st.Budgets {
		k := keyView{Key: b.KeyLabel, Configured: configured, Learned: keyRate, Use: b.SharePerSec, Instances: b.Instances, Sent: b.Used}
		if b.LearnedRate != nil {
			k.Learned = *b.LearnedRate
		}
		if b.CooldownUntil != nil {
			k.Note = "cooling down for " + b.CooldownUntil.Sub(now).Round(100*time.Millisecond).String()
		}
		v.Keys = append(v.Keys, k)
	}
	v.LastCollected, v.OldestDue = "none yet", "nothing waiting"
	if !st.Activity.LastCollected.IsZero() {
		v.LastCollected = ago(now, st.Activity.LastCollected)
	}
	if !st.Activity.OldestDue.IsZero() {
		v.OldestDue = "waiting " + max(now.Sub(st.Activity.OldestDue), 0).Round(time.Second).String()
	}
	for _, ep := range []string{provider.EndpointAuction, provider.EndpointAuctionSold} {
		p := packingView{Endpoint: ep, On: c.cfg.PackSize > 1, State: fmt.Sprintf("on (up to %d ids a call)", c.cfg.PackSize)}
		if c.cfg.PackSize <= 1 {
			p.State = fmt.Sprintf("off (collect.pack_size %d)", c.cfg.PackSize)
		}
		for _, r := range ov.Packing {
			if r.Endpoint == ep && !r.Enabled {
				p.On, p.State = false, fmt.Sprintf("OFF since %s: %s", r.ChangedAt.UTC().Format(time.RFC3339), r.Reason)
			}
		}
		v.Packing = append(v.Packing, p)
	}
	for _, i := range st.Instances {
		v.Instances = append(v.Instances, instanceView{Instance: i.Instance, Host: i.Host, PID: i.PID, Key: i.KeyLabel,
			Up: now.Sub(i.Started).Round(time.Second).String(), Heartbeat: ago(now, i.Heartbeat), Share: i.Share, Sent: i.Used})
	}
	return v
}

// Items ---------------------------------------------------------------------------------------

// pageSize is the rows of one items page.
const pageSize = 50

type itemsView struct {
	Search, Filter, Tier string
	Filters              []string
	Tiers                []string
	Rows                 []itemRowView
	// Next and First link the next page ("" on the last) and, from a later page, the first.
	// They are built here from url.Values, so the template takes them as they are.
	Next, First template.URL
	Tracked     int64 // from the status copy (the daemon's counts), not counted here
}

type itemRowView struct {
	ID, Name, Tier, Pinned, Next, Last, Reason string
	Score                                      string
	Changes, Sales                             string
	Gaps                                       int64
}

func (c *Console) itemsPage(r *http.Request, d *pageData) (string, error) {
	q := r.URL.Query()
	v := itemsView{Search: strings.TrimSpace(q.Get("q")), Filter: q.Get("filter"), Tier: q.Get("tier"),
		Filters: catalog.BrowseFilters}
	for _, t := range tiers.All() {
		v.Tiers = append(v.Tiers, string(t))
	}
	bq := catalog.BrowseQuery{Search: v.Search, Filter: v.Filter, Overdue: daemon.OverdueAfter, Limit: pageSize}
	if v.Tier != "" {
		t, err := tiers.Parse(v.Tier)
		if err != nil {
			return "", httpError{http.StatusBadRequest, "tier: " + err.Error()}
		}
		bq.Tier = t
	}
	if !validFilter(v.Filter) {
		return "", httpError{http.StatusBadRequest, fmt.Sprintf("filter %q: allowed pinned, overdue, gaps or none", v.Filter)}
	}
	if a := q.Get("after"); a != "" {
		cur, err := catalog.DecodeCursor(a)
		if err != nil {
			return "", httpError{http.StatusBadRequest, "after: not a page cursor"}
		}
		bq.After = cur
		base := url.Values{}
		for _, k := range []string{"q", "filter", "tier"} {
			if q.Get(k) != "" {
				base.Set(k, q.Get(k))
			}
		}
		v.First = template.URL("/items?" + base.Encode())
	}
	rows, next, err := catalog.BrowseItems(r.Context(), c.readsFor(r), bq)
	if err != nil {
		return "", err
	}
	for _, it := range rows {
		v.Rows = append(v.Rows, itemRowView{ID: it.ItemID, Name: it.Name, Tier: string(it.Tier), Pinned: string(it.PinnedTier),
			Score: strconv.FormatFloat(it.Score, 'f', -1, 64), Changes: rateText(it.ChangesPerHour), Sales: rateText(it.SalesPerHour),
			Gaps: it.SalesGaps, Next: timeText(it.NextCollectAt), Last: timeText(it.LastCollectedAt), Reason: it.TierReason})
	}
	if next != nil {
		nq := url.Values{}
		for _, k := range []string{"q", "filter", "tier"} {
			if q.Get(k) != "" {
				nq.Set(k, q.Get(k))
			}
		}
		nq.Set("after", next.Encode())
		v.Next = template.URL("/items?" + nq.Encode())
	}
	if ov, err := c.current(r.Context()); err == nil {
		for _, t := range ov.Status.Tiers {
			v.Tracked += t.Items
		}
	}
	d.Title, d.Nav, d.Body = "Items", "items", v
	return "items", nil
}

func validFilter(f string) bool {
	for _, ok := range catalog.BrowseFilters {
		if f == ok {
			return true
		}
	}
	return false
}

// Item ----------------------------------------------------------------------------------------

type itemView struct {
	ID, Name, Tier, Pinned, Reason, TierChanged, Next, Last string
	Score, Changes, Sales, Observed, Packing                string
	Gaps                                                    int64
	API                                                     string
	Outcome                                                 string // how the last collection ended
	Sales20                                                 []saleView
	PinTiers                                                []string
}

type saleView struct {
	At                  string
	Quantity, UnitPrice int64
}

// recentSales is how many of an item's newest sales its page lists.
const recentSales = 20

func (c *Console) itemPage(r *http.Request, d *pageData) (string, error) {
	id := r.PathValue("id")
	q := catalog.ItemsQuery{ItemID: id, IncludeSynthetic: true}
	rows, err := catalog.ListItems(r.Context(), c.readsFor(r), q)
	if err == nil && len(rows) == 0 && c.cfg.Reads != nil {
		// Not on the replica yet (imported a moment ago): the primary says for sure.
		rows, err = catalog.ListItems(r.Context(), c.pool, q)
	}
	if err != nil {
		return "", err
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("item %s is not tracked: %w", id, errNotFound)
	}
	it := rows[0]
	o := it.Observed
	v := itemView{ID: it.ItemID, Name: it.Name, Tier: string(it.Tier), Pinned: string(it.PinnedTier), Reason: it.TierReason,
		TierChanged: timeText(it.TierChangedAt), Next: timeText(it.NextCollectAt), Last: timeText(it.LastCollectedAt),
		Score: strconv.FormatFloat(it.Score, 'f', -1, 64), Changes: rateText(it.ChangesPerHour), Sales: rateText(it.SalesPerHour),
		Observed: fmt.Sprintf("%.1f collections, %.1f changes over %s (decayed)", o.Accesses, o.Changes,
			(time.Duration(o.ChangedSeconds+o.UnchangedSeconds) * time.Second).Round(time.Second)),
		Gaps: it.SalesGaps}
	if !it.Synthetic {
		v.API = c.cfg.API // the read API answers 404 for fixtures
	}
	v.Packing = fmt.Sprintf("%.2f requests a collection (its own calls)", it.Requests)
	if it.Requests < packing.Alone {
		v.Packing = fmt.Sprintf("%.2f requests a collection (shares packed calls)", it.Requests)
	}
	for _, t := range tiers.All() {
		if _, ok := t.Interval(); ok && !it.Synthetic { // a fixture is never scheduled
			v.PinTiers = append(v.PinTiers, string(t))
		}
	}
	switch {
	case it.LastOutcome == "":
		v.Outcome = "never collected"
	case it.FailureStreak > 0:
		v.Outcome = fmt.Sprintf("%s, %d failed in a row: %s", it.LastOutcome, it.FailureStreak, it.LastError)
	default:
		v.Outcome = it.LastOutcome
	}
	sales, err := history.RecentSales(r.Context(), c.reads(), id, recentSales)
	if err != nil {
		return "", err
	}
	for _, s := range sales {
		v.Sales20 = append(v.Sales20, saleView{At: s.SoldAt.UTC().Format(time.RFC3339), Quantity: s.Quantity, UnitPrice: s.UnitPrice})
	}
	d.Title, d.Nav, d.Body = it.Name, "items", v
	return "item", nil
}

// chart is an item's price chart: uPlot's columns, times in Unix seconds.
type chart struct {
	Source string     `json:"source"` // "candles 1h" or "snapshots"
	T      []int64    `json:"t"`
	Price  []*float64 `json:"price"`  // the lowest unit price (null: no listing)
	Volume []float64  `json:"volume"` // units sold
}

// chartDays is the chart's span unless ?days says otherwise; maxChartDays bounds it.
const (
	chartDays    = 7
	maxChartDays = 90
)

// chartJSON draws from hourly candles where the history keeps them, from raw snapshots
// otherwise: both are one index range of one item.
func (c *Console) chartJSON(w http.ResponseWriter, r *http.Request) {
	days := chartDays
	if s := r.URL.Query().Get("days"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxChartDays {
			http.Error(w, fmt.Sprintf("days %q: a whole number from 1 to %d", s, maxChartDays), http.StatusBadRequest)
			return
		}
		days = n
	}
	since := time.Now().Add(-time.Duration(days) * 24 * time.Hour)
	ch, err := c.readChart(r.Context(), c.readsFor(r), r.PathValue("id"), since)
	if errors.Is(err, catalog.ErrNotTracked) && c.cfg.Reads != nil {
		// Not on the replica yet (imported a moment ago), as for the item's page.
		ch, err = c.readChart(r.Context(), c.pool, r.PathValue("id"), since)
	}
	switch {
	case errors.Is(err, catalog.ErrNotTracked):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		if r.Context().Err() == nil {
			c.log.Warn("console: chart failed", zap.Error(err))
		}
		http.Error(w, "chart: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(ch)
}

func (c *Console) readChart(ctx context.Context, db reader, id string, since time.Time) (chart, error) {
	ch := chart{T: []int64{}, Price: []*float64{}, Volume: []float64{}}
	s, err := catalog.ReadSeries(ctx, db, id, history.Hourly, since, time.Time{})
	if err != nil {
		return ch, err
	}
	if len(s.Candle) > 0 {
		ch.Source = "candles 1h"
		for _, cd := range s.Candle {
			ch.T = append(ch.T, cd.Bucket.Unix())
			ch.Price = append(ch.Price, price(cd.Low))
			ch.Volume = append(ch.Volume, float64(cd.SalesQuantity))
		}
		return ch, nil
	}
	if s, err = catalog.ReadSeries(ctx, db, id, "raw", since, time.Time{}); err != nil {
		return ch, err
	}
	ch.Source = "snapshots"
	for _, p := range s.Points {
		ch.T = append(ch.T, p.At.Unix())
		ch.Price = append(ch.Price, price(p.Lowest))
		ch.Volume = append(ch.Volume, float64(p.SalesQuantity))
	}
	return ch, nil
}

func price(p *int64) *float64 {
	if p == nil {
		return nil
	}
	f := float64(*p)
	return &f
}

// Login ---------------------------------------------------------------------------------------

func (c *Console) loginPage(r *http.Request, d *pageData) (string, error) {
	if !c.actionsEnabled() {
		return "", httpError{http.StatusForbidden, "the console is read-only: no console password is configured (docs/console.md)"}
	}
	d.Title, d.Back = "Log in", localPath(r.URL.Query().Get("back"))
	return "login", nil
}

// Templates -----------------------------------------------------------------------------------

var funcs = template.FuncMap{
	"pct":  func(f float64) string { return strconv.FormatFloat(100*f, 'f', 0, 64) + "%" },
	"rate": func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
	"warn": func(f float64) bool { return f > 1 },
	"join": strings.Join,
}

func parseTemplates() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range []string{"overview", "items", "item", "login", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console templates: %w", err)
		}
		out[name] = t
	}
	// The overview's body alone, for its refresh.
	t, err := template.New("overview.part").Funcs(funcs).ParseFS(templateFS, "templates/overview.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	t, err = t.New("page").Parse(`{{template "ov" .}}`)
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	out["overview.part"] = t
	return out, nil
}

// Formatting ----------------------------------------------------------------------------------

// noForecast stands for a freshness no stored plan predicted.
const noForecast = "—"

// freshText is a predicted freshness as a percentage; one decimal, as plans differ in it near 100 %.
func freshText(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

func ago(now, t time.Time) string {
	return max(now.Sub(t), 0).Round(time.Second).String() + " ago"
}

func timeText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func rateText(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64)
}

func ratio(a, b float64) float64 {
	if b <= 0 || math.IsNaN(a) {
		return 0
	}
	return a / b
}

// readsText says where the item pages read from: the state is read live, not from the status
// copy, so the line is as fresh as the router's last measurement.
func readsText(st store.ReadState) (string, bool) {
	if !st.Replica {
		return "", false
	}
	return fmt.Sprintf("from the %s; replica %s, max lag %s", st, st.Where, st.MaxLag), st.Source == store.SourceReplica
}
