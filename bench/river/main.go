// Command riverbench measures River working no-op jobs on a given database, so `make bench`
// can put the collector's claim+reschedule cycle next to a well-known PostgreSQL job queue in
// the same run on the same server. It lives in its own module so River never enters the
// product's go.mod.
//
// It installs River's schema (rivermigrate), inserts -jobs no-op jobs with InsertManyFast
// (not timed), starts a client and times from Start until the -work'th job-completed event
// (all of them by default), then checks the river_job table agrees. -work below -jobs measures
// River's rate with a large table of available jobs without working all of them, as the
// collector's large cycle does. It prints one JSON object on stdout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

type result struct {
	Jobs       int     `json:"jobs"`
	Worked     int     `json:"worked"`
	MaxWorkers int     `json:"max_workers"`
	InsertSecs float64 `json:"insert_seconds"`
	WorkSecs   float64 `json:"work_seconds"`
	JobsPerSec float64 `json:"jobs_per_second"`
}

func main() {
	url := flag.String("url", "", "database URL (an empty database: River's schema is installed into it)")
	jobs := flag.Int("jobs", 100_000, "no-op jobs to insert")
	work := flag.Int("work", 0, "time this many completed jobs, then stop (0: all of -jobs)")
	workers := flag.Int("workers", river.QueueNumWorkersMax, "MaxWorkers of the default queue")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *work <= 0 || *work > *jobs {
		*work = *jobs
	}
	res, err := run(ctx, *url, *jobs, *work, *workers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

func run(ctx context.Context, url string, n, w, maxWorkers int) (result, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return result{}, fmt.Errorf("connect %s: %w", url, err)
	}
	defer pool.Close()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return result{}, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return result{}, fmt.Errorf("install River schema: %w", err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Logger:  quiet,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers: workers,
	})
	if err != nil {
		return result{}, err
	}

	t0 := time.Now()
	params := make([]river.InsertManyParams, 0, 10_000)
	for left := n; left > 0; left -= len(params) {
		params = params[:0]
		for range min(left, cap(params)) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return result{}, fmt.Errorf("insert jobs: %w", err)
		}
	}
	insert := time.Since(t0)

	// Completion events are sent after River has recorded the job completed; the channel is
	// sized so that none is dropped, including those of jobs still in flight after the w'th.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n + 1,
	})
	defer unsubscribe()
	t1 := time.Now()
	if err := client.Start(ctx); err != nil {
		return result{}, fmt.Errorf("start client: %w", err)
	}
	for done := 0; done < w; done++ {
		select {
		case <-events:
		case <-ctx.Done():
			return result{}, fmt.Errorf("only %d of %d jobs completed: %w", done, w, ctx.Err())
		}
	}
	work := time.Since(t1)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer stopCancel()
	if err := client.Stop(stopCtx); err != nil {
		return result{}, fmt.Errorf("stop client: %w", err)
	}
	var completed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
		return result{}, err
	}
	// Stop lets the jobs in flight after the w'th finish, so a partial run may complete a
	// few more than w, never fewer.
	if completed < w {
		return result{}, fmt.Errorf("river_job has %d completed jobs, want %d", completed, w)
	}
	return result{Jobs: n, Worked: w, MaxWorkers: maxWorkers, InsertSecs: insert.Seconds(), WorkSecs: work.Seconds(),
		JobsPerSec: float64(w) / work.Seconds()}, nil
}
