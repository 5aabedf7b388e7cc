package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/tiers"
)

// A pass the provider's status pauses claims nothing, and the loop re-reads the status (a sleep
// a status change cuts short) rather than asking the database for the next due item.
func TestPausedPassWaitsForTheStatus(t *testing.T) {
	e := newEnv(t, 3, neoplesim.Options{})
	e.track(t, 0, 3, tiers.Hot, -time.Second)
	if _, err := provider.SetStatus(context.Background(), e.pool, "neople", provider.Maintenance, "test"); err != nil {
		t.Fatal(err)
	}
	res := pass(t, e.build(t, testConfig(), nil))
	if !res.Summary.Paused || res.Summary.Claimed != 0 || res.Next || res.Pause != 0 {
		t.Fatalf("pass under MAINTENANCE %+v: want paused, nothing claimed, no pause and no wake-up asked", res)
	}
}

// A rate-limit answer pauses the loop for at least daemon.budget.cooldown, a pause nothing cuts
// short, and without a cluster budget the pass itself records the key's cool-down for the
// other instances and `collector status`.
func TestRateLimitedPassCoolsTheKeyDown(t *testing.T) {
	const n = 40
	e := newEnv(t, n, neoplesim.Options{Rate: 2})
	e.track(t, 0, n, tiers.Cold, -time.Second)
	cfg := testConfig()
	cfg.Daemon.Budget.Cooldown = 3 * time.Second
	res := pass(t, e.build(t, cfg, nil))
	if res.Pause < cfg.Daemon.Budget.Cooldown || res.Next {
		t.Fatalf("pass against a provider allowing 2/s (stopped: %v): pause %s, next %v; want a pause of at least %s",
			res.Summary.Stop, res.Pause, res.Next, cfg.Daemon.Budget.Cooldown)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM budget_cooldowns WHERE key_label = $1 AND until > now()`, cfg.KeyLabel); c != 1 {
		t.Fatalf("%d cool-downs recorded for the key, want 1", c)
	}
}
