package daemon

import (
	"context"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/retention"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// Metrics exposes the registry.
func (d *Daemon) Metrics() *telemetry.Metrics { return d.metrics }

// ProviderStatus is the provider's effective status as this daemon last read it.
func (d *Daemon) ProviderStatus() provider.Status { return d.health.Status() }

// Share is the budget share (nil when disabled).
func (d *Daemon) Share() *budget.Share { return d.share }

// runOnce prunes one turn.
func (s *retentionService) runOnce(ctx context.Context) (retention.Result, error) {
	return s.pruner.RunOnce(ctx)
}
