package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// planConfig configures the plan service.
type planConfig struct {
	// Catalog is the popularity and tier policy; Catalog.RecalcInterval (> 0) is how often a
	// plan is made whatever happens.
	Catalog config.CatalogConfig
	// Dispatch is the dispatcher's configuration, whose packing settings the plan's cost model
	// reads; AuctionLimit is the listings limit the market client asks for.
	Dispatch     dispatcher.Config
	AuctionLimit int
	// CheckEvery is how often the cost loop is asked whether to plan sooner
	// (Config.GaugeInterval, the pace at which it learns the item count).
	CheckEvery time.Duration
	// Planned, when initialised (tests), hears every plan.
	Planned *testsignal.Signal[planResult]
}

// planService recalculates popularity and plans the tiers within the budget the cost loop
// says the plan may assume: every catalog.recalc_interval, and sooner when the cost loop asks.
type planService struct {
	cfg     planConfig
	pool    *pgxpool.Pool
	loop    *budget.Loop
	learned func() float64 // the adaptive budget's learned share (1 without one)
	metrics *telemetry.Metrics
	log     *zap.Logger
	wake    chan<- struct{} // promotions may have made items due sooner
	writes  writeReports    // hears this loop's refused writes
}

func newPlanService(cfg planConfig, s *planService) (*planService, error) {
	if cfg.Catalog.RecalcInterval <= 0 {
		return nil, fmt.Errorf("plan: catalog.recalc_interval %s must be > 0", cfg.Catalog.RecalcInterval)
	}
	if cfg.CheckEvery <= 0 {
		return nil, fmt.Errorf("plan: check interval %s must be > 0", cfg.CheckEvery)
	}
	s.cfg = cfg
	return s, nil
}

// planResult is what one plan did.
type planResult struct {
	catalog.Result
	// Share is the share of the configured budget the plan assumed.
	Share float64
}

// Start plans every catalog.recalc_interval, and whenever the cost loop asks, until ctx ends.
func (s *planService) Start(ctx context.Context) {
	t := time.NewTicker(s.cfg.Catalog.RecalcInterval)
	defer t.Stop()
	check := time.NewTicker(s.cfg.CheckEvery)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-check.C:
			if !s.loop.ReplanDue(time.Now(), s.learned()) {
				continue
			}
		}
		res, err := s.runOnce(ctx, time.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			s.metrics.LoopErrors.WithLabelValues("recalc").Inc()
			s.log.Warn("popularity recalculation failed; next run in catalog.recalc_interval", zap.Error(err))
		case err == nil && !res.Skipped:
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
}

// runOnce plans once, at now, within the share of the budget the feedback loop allows.
func (s *planService) runOnce(ctx context.Context, now time.Time) (planResult, error) {
	share := s.loop.PlanShare(s.learned())
	res := planResult{Share: share}
	pm, err := dispatcher.PackingModelNow(ctx, s.pool, s.cfg.Dispatch, s.cfg.AuctionLimit)
	if err != nil {
		s.loop.PlanFailed(now)
		return res, err
	}
	res.Result, err = catalog.RecalculatePopularity(ctx, s.pool, catalog.PolicyFromConfig(s.cfg.Catalog, s.loop.PlanLimit(share), pm))
	if err != nil {
		s.loop.PlanFailed(now)
		s.writes.refused(err)
		return res, err
	}
	s.loop.Planned(now, share)
	if !res.Skipped {
		s.log.Info("popularity recalculated", zap.Int("scored", res.Scored), zap.Int("promoted", res.Promoted),
			zap.Int("demoted", res.Demoted), zap.Int("dormant", res.Dormant), zap.Int("reactivated", res.Reactivated),
			zap.Float64("budget_share", share), zap.Float64("cost_ratio", s.loop.CostRatio()))
	}
	s.cfg.Planned.Signal(res)
	return res, nil
}
