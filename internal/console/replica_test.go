package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/console"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// With pages read from a replica, the operator who pins an item is sent back to a page that
// shows the pin, though the replica has not replayed it; everyone else reads the replica. An
// item the replica does not have yet is found on the primary rather than answered 404, its
// page and its chart.
func TestAnActionIsSeenOnThePageItReturnsTo(t *testing.T) {
	s := storetest.NewStandby(t)
	ctx := context.Background()
	primary, standby := s.Pools(t)
	reads := store.NewReads(primary, standby, store.ReadsConfig{MaxLag: time.Hour, Every: time.Hour, Timeout: testkit.Timeout}, nil)
	storetest.Items(t, primary, storetest.Item{ID: candleItem, Name: "Golden Needle", Tier: tiers.Warm})
	testkit.Eventually(t, testkit.Timeout, "the replica to hold the item and serve reads", func() bool {
		var n int
		return standby.QueryRow(ctx, `SELECT count(*) FROM tracked_items`).Scan(&n) == nil && n == 1 &&
			reads.RunOnce(ctx).Source == store.SourceReplica
	})
	s.PauseReplay(t)
	storetest.Items(t, primary, storetest.Item{ID: snapshotItem, Name: "Silver Thread", Tier: tiers.Warm}) // not replayed

	c, err := console.New(primary, console.Config{ProviderName: "neople", Market: config.Default().Provider.Market, PackSize: 10,
		User: testUser, Password: config.Secret(testPassword), Refresh: time.Hour, Session: time.Hour, Reads: reads,
		ReadYourWrites: testkit.Timeout}, // a window no loaded machine outruns
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Start(cctx) }()
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	page := func(hc *http.Client, path string) (int, string) {
		t.Helper()
		res, err := hc.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	if code, _ := page(http.DefaultClient, "/items/"+snapshotItem); code != http.StatusOK {
		t.Fatalf("an item the replica has not replayed: %d, want its page from the primary", code)
	}
	if code, body := page(http.DefaultClient, "/items/"+snapshotItem+"/chart.json"); code != http.StatusOK {
		t.Fatalf("the chart of an item the replica has not replayed: %d %s, want it from the primary", code, body)
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	if code := post(t, hc, srv.URL+"/login", url.Values{"user": {testUser}, "password": {testPassword}}); code != http.StatusSeeOther {
		t.Fatalf("login: %d", code)
	}
	form := url.Values{"item": {candleItem}, "tier": {"HOT_1M"}, "back": {"/items/" + candleItem},
		"csrf": {csrfOf(t, hc, srv.URL+"/items/"+candleItem)}}
	if code := post(t, hc, srv.URL+"/actions/pin", form); code != http.StatusSeeOther {
		t.Fatalf("pin: %d", code)
	}
	if _, body := page(hc, "/items/"+candleItem); !strings.Contains(body, "(pinned)") {
		t.Fatal("the page the pin returns to does not show it")
	}
	if _, body := page(http.DefaultClient, "/items/"+candleItem); strings.Contains(body, "(pinned)") {
		t.Fatal("another reader saw the pin through a paused replica: the test proves nothing")
	}
}
