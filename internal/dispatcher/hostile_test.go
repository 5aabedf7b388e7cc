package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/tiers"
)

func checkCleanText(t *testing.T, what, s string) {
	t.Helper()
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		t.Fatalf("%s is not clean UTF-8: %q", what, s)
	}
	if n := utf8.RuneCountInString(s); n > provider.MaxErrorRunes+1 {
		t.Fatalf("%s has %d runes, cap %d", what, n, provider.MaxErrorRunes)
	}
}

// Hostile provider text (NUL, EUC-KR, gzip bytes, 20,000 Korean characters) in an item error's
// message, in a raw error body and in a maintenance message reaches last_error, the logs and
// provider_status clean, and the maintenance answer is recorded like a clean one.
func TestHostileProviderTextIsCleanInEveryStoreAndLog(t *testing.T) {
	t.Parallel()
	for _, h := range neoplesim.HostileTexts() {
		t.Run(h.Name, func(t *testing.T) {
			var maintenance atomic.Bool
			var e *env
			e = setup(t, 3, tiers.Active, func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					id := r.URL.Query().Get("itemId")
					switch {
					case maintenance.Load():
						w.WriteHeader(http.StatusServiceUnavailable)
						_, _ = w.Write(neoplesim.HostileEnvelope(503, "DNF980", h.Text))
					case id == e.items[0].ItemID:
						w.WriteHeader(http.StatusNotFound)
						_, _ = w.Write(neoplesim.HostileEnvelope(404, "DNF003", h.Text))
					case id == e.items[1].ItemID:
						w.WriteHeader(http.StatusInternalServerError)
						_, _ = w.Write([]byte(h.Text))
					default:
						next.ServeHTTP(w, r)
					}
				})
			})
			core, logs := observer.New(zapcore.DebugLevel)
			s, err := e.dispatcher(t, Config{}, zap.New(core)).RunOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if s.Collected != 1 || s.Failed != 2 {
				t.Fatalf("summary %s: want 1 collected, 2 failed (nothing stranded)", s)
			}
			for _, it := range e.items[:2] {
				var lastErr string
				if err := e.pool.QueryRow(context.Background(),
					`SELECT last_error FROM tracked_items WHERE item_id = $1 AND lease_token IS NULL`, it.ItemID).Scan(&lastErr); err != nil {
					t.Fatalf("item %s: %v", it.ItemID, err)
				}
				checkCleanText(t, "last_error", lastErr)
			}

			maintenance.Store(true)
			if _, err := e.pool.Exec(context.Background(), `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
				t.Fatal(err)
			}
			if _, err := e.dispatcher(t, Config{}, zap.New(core)).RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			row, err := provider.ReadStatus(context.Background(), e.pool, "neople")
			if err != nil {
				t.Fatal(err)
			}
			if row.Status != provider.Maintenance {
				t.Fatalf("status %s after a DNF980 with a hostile message; want MAINTENANCE", row.Status)
			}
			checkCleanText(t, "provider_status reason", row.Reason)

			for _, entry := range logs.All() {
				checkCleanText(t, "log message", entry.Message)
				for k, v := range entry.ContextMap() {
					if s, ok := v.(string); ok {
						checkCleanText(t, "log field "+k, s)
					}
				}
			}
		})
	}
}

// A sale dated 2099 is dropped at the boundary: it never advances last_sale_at, so later real
// sales of the item are still stored. An answer of only another item's rows fails the item
// with outcome rows_rejected, and the item is rescheduled like any failure.
func TestImpossibleRowsNeverReachTheDatabase(t *testing.T) {
	t.Parallel()
	var e *env
	var soldAt atomic.Value // the real sale's date
	soldAt.Store(time.Now().Add(-time.Hour))
	e = setup(t, 2, tiers.Active, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.URL.Query().Get("itemId")
			switch {
			case r.URL.Path == provider.EndpointAuctionSold && id == e.items[0].ItemID:
				real := soldAt.Load().(time.Time).In(provider.KST).Format(provider.DateLayout)
				fmt.Fprintf(w, `{"rows":[{"soldDate":"2099-01-01 00:00:00","itemId":%[1]q,"count":1,"price":7,"unitPrice":7},
					{"soldDate":%[2]q,"itemId":%[1]q,"count":1,"price":5,"unitPrice":5}]}`, id, real)
			case r.URL.Path == provider.EndpointAuction && id == e.items[1].ItemID:
				fmt.Fprintf(w, `{"rows":[{"itemId":%q,"regDate":"2026-01-01 00:00:00","count":1,"unitPrice":5}]}`, e.items[0].ItemID)
			default:
				next.ServeHTTP(w, r)
			}
		})
	})
	ctx := context.Background()
	for pass := 0; pass < 2; pass++ {
		if pass == 1 {
			soldAt.Store(time.Now().Add(-time.Minute))
			if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
				t.Fatal(err)
			}
		}
		s, err := e.dispatcher(t, Config{}, nil).RunOnce(ctx)
		if err != nil || s.Collected != 1 || s.Failed != 1 {
			t.Fatalf("pass %d: %s, %v; want 1 collected, 1 failed", pass, s, err)
		}
		var last time.Time
		if err := e.pool.QueryRow(ctx, `SELECT last_sale_at FROM tracked_items WHERE item_id = $1`, e.items[0].ItemID).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if want := soldAt.Load().(time.Time).Truncate(time.Second); !last.Equal(want) {
			t.Fatalf("pass %d: last_sale_at %v, want the real sale's %v", pass, last, want)
		}
	}
	if n := count(t, e.pool, `SELECT count(*) FROM auction_sales WHERE item_id = $1`, e.items[0].ItemID); n != 2 {
		t.Fatalf("%d sales stored, want the 2 real ones", n)
	}
	var outcome, lastErr string
	if err := e.pool.QueryRow(ctx, `SELECT last_outcome, last_error FROM tracked_items WHERE item_id = $1 AND lease_token IS NULL`,
		e.items[1].ItemID).Scan(&outcome, &lastErr); err != nil {
		t.Fatal(err)
	}
	if outcome != "rows_rejected" || !strings.Contains(lastErr, provider.RejectForeignItem) {
		t.Fatalf("item answered with another item's rows: outcome %q, error %q", outcome, lastErr)
	}
}

// A second still under way when its page is read may gain a sale ordered among its others by
// price, which would shift the positions its stored sales are keyed by: its sales are left for
// the next collection. So are sales dated ahead of the clock (within the row check's day):
// stored, they would move last_sale_at past every real sale and hide those for hours.
func TestSalesOfASecondUnderWayOrAheadWait(t *testing.T) {
	t.Parallel()
	var e *env
	var rows atomic.Value // the sales page, newest first
	e = setup(t, 1, tiers.Active, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != provider.EndpointAuctionSold {
				next.ServeHTTP(w, r)
				return
			}
			var b strings.Builder
			for i, sale := range rows.Load().([]time.Time) {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `{"soldDate":%q,"itemId":%q,"count":1,"price":%[3]d,"unitPrice":%[3]d}`,
					sale.In(provider.KST).Format(provider.DateLayout), e.items[0].ItemID, 100*(i+1))
			}
			fmt.Fprintf(w, `{"rows":[%s]}`, b.String())
		})
	})
	ctx := context.Background()
	now := time.Now()
	past := now.Add(-time.Minute)
	// The second under way is a second ahead by minutes, so that the test holds however slow the
	// machine: history's TestNewSalesHoldsBackASecondStillUnderWay pins the boundary itself.
	open := now.Add(10 * time.Minute)
	rows.Store([]time.Time{now.Add(2 * time.Hour), open, open, past})
	collect := func() {
		t.Helper()
		if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
			t.Fatal(err)
		}
		if s, err := e.dispatcher(t, Config{}, nil).RunOnce(ctx); err != nil || s.Collected != 1 {
			t.Fatalf("pass: %s %v", s, err)
		}
	}
	collect()
	var last time.Time
	if err := e.pool.QueryRow(ctx, `SELECT last_sale_at FROM tracked_items`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM auction_sales`); n != 1 || !last.Equal(past.Truncate(time.Second)) {
		t.Fatalf("%d sales stored, last_sale_at %v; want only the settled one, at %v", n, last, past.Truncate(time.Second))
	}
	// A sale after the one stored, but before the second that was under way, is not hidden.
	rows.Store([]time.Time{now.Add(2 * time.Hour), open, open, past.Add(30 * time.Second), past})
	collect()
	if n := count(t, e.pool, `SELECT count(*) FROM auction_sales`); n != 2 {
		t.Fatalf("%d sales stored after a later settled sale came, want 2", n)
	}
}

// An address that is not the API (a wrong provider.base_url: a web server's 404 page) ends the
// pass at its first answer with an error naming the key, instead of failing every item as if
// each were broken: only the item the probe asked (ownAnswer) is marked failed, and every item
// is handed back still due.
func TestAWrongBaseURLStopsThePassAndNamesTheKey(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	e := setup(t, 40, tiers.Active, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("<html><body>404 Not Found</body></html>"))
		})
	})
	s, err := e.dispatcher(t, Config{Concurrency: 2}, zap.NewNop()).RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "provider.base_url") || !strings.Contains(err.Error(), e.srv.URL) {
		t.Fatalf("RunOnce error %v; want one naming provider.base_url and the address", err)
	}
	if s.Stop != StopEndpoint || s.Failed != 0 || s.Collected != 0 {
		t.Fatalf("summary %s; want stop=endpoint with nothing failed or collected", s)
	}
	if n := calls.Load(); n >= 40 {
		t.Fatalf("%d calls for 40 items: the pass went on after the first answer", n)
	}
	var failed, held, notDue int
	if err := e.pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE last_error IS NOT NULL), count(*) FILTER (WHERE lease_token IS NOT NULL),
		       count(*) FILTER (WHERE next_collect_at > now())
		FROM tracked_items`).Scan(&failed, &held, &notDue); err != nil {
		t.Fatal(err)
	}
	// The item the probe asked has its answer recorded, without its lease or schedule.
	if failed != 1 || held != 0 || notDue != 0 {
		t.Fatalf("%d items failed, %d still leased, %d no longer due; want every item handed back as it was but the probed one, failed", failed, held, notDue)
	}
}
