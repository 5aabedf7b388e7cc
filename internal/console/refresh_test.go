package console

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// An overview left open re-reads the status every few seconds through a whole database
// outage: the failures are one warning a streak (then one a minute), not one per refresh.
func TestFailedRefreshesAreLoggedOnceAStreak(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/gone?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	core, logs := observer.New(zapcore.InfoLevel)
	c, err := New(pool, Config{Session: time.Hour, ProviderName: "neople"}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.refresh(context.Background())
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Fatalf("%d warnings for 3 failed refreshes, want 1", n)
	}
	if ov, _ := c.current(context.Background()); ov.Err == "" {
		t.Fatal("the page's copy does not carry the refresh's error")
	}
}
