package provider_test

import (
	"context"
	"testing"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// Every change of the automatic status or of the override is logged, whoever writes it, and
// a report of the same status is not a transition.
func TestTransitionsAreLoggedNewestFirst(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	steps := []func() error{
		func() error {
			_, err := provider.SetStatus(ctx, pool, "neople", provider.Degraded, "5 of 20 failed")
			return err
		},
		func() error {
			_, err := provider.SetStatus(ctx, pool, "neople", provider.Degraded, "6 of 20 failed")
			return err
		},
		func() error { return provider.SetOverride(ctx, pool, "neople", provider.Maintenance, "patch day", 0) },
		func() error { return provider.ClearOverride(ctx, pool, "neople") },
		func() error {
			_, err := provider.SetStatus(ctx, pool, "neople", provider.Healthy, "recovered")
			return err
		},
	}
	for _, s := range steps {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := provider.ReadTransitions(ctx, pool, "neople", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Transition{
		{Kind: "automatic", Status: provider.Healthy, Reason: "recovered"},
		{Kind: "override cleared"},
		{Kind: "override", Status: provider.Maintenance, Reason: "patch day"},
		{Kind: "automatic", Status: provider.Degraded, Reason: "5 of 20 failed"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d transitions, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Kind != w.Kind || g.Status != w.Status || g.Reason != w.Reason || g.At.IsZero() {
			t.Errorf("transition %d: %+v, want %+v", i, g, w)
		}
	}
}
