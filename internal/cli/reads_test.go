package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// With database.read_url on a real standby, `collector history` reads from it and says so, and
// `collector status` shows where reads go and the lag; with the standby stopped, history still
// answers, from the primary, and both say why.
func TestHistoryAndStatusWithAReadReplica(t *testing.T) {
	s := storetest.NewStandby(t)
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv("NEOPLE_ITEM_API_KEY", "")
	t.Setenv("NEOPLE_MARKET_API_KEY", "")
	t.Setenv("COLLECTOR_DATABASE_READ_URL", s.StandbyURL)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.PrimaryURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	storetest.Items(t, conn, storetest.Item{ID: "r1"})

	reads := func() map[string]any {
		t.Helper()
		out, errOut, err := runCollector(t, "status", "--database-url", s.PrimaryURL, "-o", "json")
		if err != nil {
			t.Fatalf("status: %v\n%s", err, errOut)
		}
		var v struct {
			Reads map[string]any `json:"reads"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		return v.Reads
	}
	var r map[string]any
	testkit.Eventually(t, testkit.Timeout, "status to report reads from the replica", func() bool {
		r = reads()
		return r["source"] == "replica"
	})
	if r["replica"] != true || r["lag_seconds"] == nil || r["max_lag_seconds"] != 5.0 || r["reason"] != nil {
		t.Fatalf("status reads with the standby in step: %v", r)
	}
	out, errOut, err := runCollector(t, "history", "r1", "--database-url", s.PrimaryURL)
	if err != nil || !strings.Contains(out, "read from the replica (lag ") {
		t.Fatalf("history with the standby in step: %v\n%s%s", err, out, errOut)
	}

	s.StopStandby(t)
	r = reads()
	if r["source"] != "primary" || r["lag_seconds"] != nil || !strings.Contains(r["reason"].(string), "replica unreachable") {
		t.Fatalf("status reads with the standby stopped: %v", r)
	}
	out, errOut, err = runCollector(t, "history", "r1", "--database-url", s.PrimaryURL)
	if err != nil || !strings.Contains(out, "read from the primary (replica unreachable") || !strings.Contains(errOut, "reads go to the primary") {
		t.Fatalf("history with the standby stopped: %v\n%s%s", err, out, errOut)
	}
}
