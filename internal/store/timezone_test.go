package store_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
	_ "time/tzdata" // Asia/Seoul on a host without zone files too

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// Timestamps read through the pools are in UTC whatever the host's time zone: the test runs
// itself again with TZ=Asia/Seoul (the provider's own zone), where pgx would otherwise scan
// them in +09:00.
func TestTimestampsReadInUTCWhateverTheHostsZone(t *testing.T) {
	const child = "DUECOLLECTOR_TZ_CHILD"
	if os.Getenv(child) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTimestampsReadInUTCWhateverTheHostsZone$", "-test.count=1")
		cmd.Env = append(os.Environ(), child+"=1", "TZ=Asia/Seoul")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("with TZ=Asia/Seoul: %v\n%s", err, out)
		}
		return
	}
	if _, off := time.Now().Zone(); off != 9*3600 {
		t.Fatalf("the host zone is %d s east of UTC, want Asia/Seoul's 32400: the test proves nothing", off)
	}
	url := storetest.NewDatabase(t)
	ctx := context.Background()
	pool, err := store.Open(ctx, store.PoolConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var one time.Time
	var many []time.Time
	if err := pool.QueryRow(ctx, `SELECT now(), ARRAY[now(), now() - interval '1 day']`).Scan(&one, &many); err != nil {
		t.Fatal(err)
	}
	for _, ts := range append(many, one) {
		if ts.Location() != time.UTC {
			t.Errorf("%s read in %s, want UTC", ts, ts.Location())
		}
	}
}
