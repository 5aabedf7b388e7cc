package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/tiers"
)

// ItemSearcher resolves names through GET /df/items; *provider.Client for the item workload
// is one.
type ItemSearcher interface {
	SearchItems(ctx context.Context, name, wordType string, limit int) ([]provider.Item, error)
}

// ImportOptions tunes one import.
type ImportOptions struct {
	// DefaultTier is the starting tier of targets that name none (catalog.default_tier).
	DefaultTier tiers.Tier
	// Concurrency bounds searches in flight; 0 = ImportConcurrencyDefault.
	Concurrency int
	// Progress, if set, is called after each target is resolved, from one goroutine at a time.
	Progress func(done, total, failed int)
}

// ImportConcurrencyDefault bounds an import's searches in flight: the item workload's budget,
// not this, limits the request rate.
const ImportConcurrencyDefault = 4

// TargetFailure is a target that imported nothing.
type TargetFailure struct {
	Target Target
	Reason string
	// Temporary: the search failed for a reason running the import again may not meet (a
	// timeout, a 5xx, the key's rate limit), not for what the target says.
	Temporary bool
}

func (f TargetFailure) String() string {
	return fmt.Sprintf("%s: %q: %s", f.Target.Where(), f.Target.Name, f.Reason)
}

// ImportReport says what an import did.
type ImportReport struct {
	Targets   int // targets in the file
	Matched   int // distinct items the targets resolved to
	Inserted  int // new rows in tracked_items
	Renamed   int // known ids whose name changed
	Unchanged int // known ids left as they were
	Failures  []TargetFailure
	// Warnings are targets that imported something but deserve a look (e.g. a front or full
	// search that hit the API's cap of 30 rows, so some items may be missing).
	Warnings []TargetFailure
}

// ErrTargetsFailed is wrapped by ImportReport.Err when some targets imported nothing.
var ErrTargetsFailed = errors.New("import targets failed")

// Temporary counts the failures running the import again may not meet.
func (r ImportReport) Temporary() int {
	n := 0
	for _, f := range r.Failures {
		if f.Temporary {
			n++
		}
	}
	return n
}

// Err is nil when every target imported something, and otherwise an error listing the
// failed targets by name and line that wraps ErrTargetsFailed.
func (r ImportReport) Err() error {
	if len(r.Failures) == 0 {
		return nil
	}
	lines := make([]string, len(r.Failures))
	for i, f := range r.Failures {
		lines[i] = "  " + f.String()
	}
	return fmt.Errorf("%w: %d of %d (the rest were imported):\n%s",
		ErrTargetsFailed, len(r.Failures), r.Targets, strings.Join(lines, "\n"))
}

type resolved struct {
	items     []provider.Item
	failure   string
	temporary bool // the failure was the search's, and may pass
	warning   string
}

// Import resolves every target through /df/items and upserts what matched into
// tracked_items in one statement. A target that matches nothing, or several items when an
// exact name was asked for, is reported and the rest are still imported. New items start at
// their target's tier and are due at once; known items keep their tier and schedule and only
// take a new name, so importing the same file twice changes no row. The error is non-nil
// only when the import itself could not run (bad key, maintenance, database): per-target
// problems are in the report (see ImportReport.Err).
func Import(ctx context.Context, db DB, search ItemSearcher, targets []Target, opt ImportOptions) (ImportReport, error) {
	rep := ImportReport{Targets: len(targets)}
	if opt.DefaultTier == "" {
		opt.DefaultTier = tiers.Warm
	}
	results, err := resolveAll(ctx, search, targets, opt)
	if err != nil {
		return rep, err
	}

	var ids, names, tierNames, reasons []string
	seen := map[string]bool{}
	for i, r := range results {
		t := targets[i]
		if r.failure != "" {
			rep.Failures = append(rep.Failures, TargetFailure{Target: t, Reason: r.failure, Temporary: r.temporary})
			continue
		}
		if r.warning != "" {
			rep.Warnings = append(rep.Warnings, TargetFailure{Target: t, Reason: r.warning})
		}
		tier := t.Tier
		if tier == "" {
			tier = opt.DefaultTier
		}
		for _, it := range r.items {
			if !isItemID(it.ItemID) {
				// Tracked, it would fail every collection (and break packed calls); the
				// rest of what the target found is still imported.
				rep.Warnings = append(rep.Warnings, TargetFailure{Target: t,
					Reason: fmt.Sprintf("the provider answered an item id %q that is not 32 lowercase hex characters: skipped", it.ItemID)})
				continue
			}
			// Two targets may find the same item (a prefix search and an exact name): the
			// first line of the file decides its starting tier.
			if seen[it.ItemID] {
				continue
			}
			seen[it.ItemID] = true
			ids = append(ids, it.ItemID)
			names = append(names, it.ItemName)
			tierNames = append(tierNames, string(tier))
			reasons = append(reasons, "imported from "+t.Where())
		}
	}
	rep.Matched = len(ids)
	if len(ids) == 0 {
		return rep, nil
	}

	// The WHERE on DO UPDATE leaves rows whose name is unchanged untouched (no new row
	// version, no updated_at bump), which is what makes a re-import a no-op. RETURNING only
	// yields inserted and renamed rows; xmax = 0 tells the two apart.
	rows, err := db.Query(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at, tier_changed_at, tier_reason)
		SELECT u.item_id, u.item_name, u.tier,
		       CASE WHEN u.tier = 'DORMANT' THEN NULL ELSE now() END, now(), u.reason
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(item_id, item_name, tier, reason)
		ORDER BY u.item_id -- two imports lock their common items in one order: no deadlock
		ON CONFLICT (item_id) DO UPDATE SET item_name = EXCLUDED.item_name, updated_at = now()
		WHERE tracked_items.item_name IS DISTINCT FROM EXCLUDED.item_name
		RETURNING (xmax = 0) AS inserted`,
		ids, names, tierNames, reasons)
	if err != nil {
		return rep, fmt.Errorf("upsert %d imported items into tracked_items: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var inserted bool
		if err := rows.Scan(&inserted); err != nil {
			return rep, fmt.Errorf("upsert imported items: %w", err)
		}
		if inserted {
			rep.Inserted++
		} else {
			rep.Renamed++
		}
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("upsert %d imported items into tracked_items: %w", len(ids), err)
	}
	rep.Unchanged = len(ids) - rep.Inserted - rep.Renamed
	return rep, nil
}

// resolveAll searches every target with bounded concurrency. The first error that makes
// further searches pointless (key refused, maintenance, a bug, cancellation) stops the rest.
func resolveAll(ctx context.Context, search ItemSearcher, targets []Target, opt ImportOptions) ([]resolved, error) {
	workers := opt.Concurrency
	if workers < 1 {
		workers = ImportConcurrencyDefault
	}
	workers = min(workers, len(targets))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	results := make([]resolved, len(targets))
	next := make(chan int)
	var (
		wg           sync.WaitGroup
		mu           sync.Mutex
		done, failed int
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := resolveTarget(ctx, search, targets[i])
				if err != nil {
					cancel(err)
					continue
				}
				results[i] = r
				mu.Lock()
				done++
				if r.failure != "" {
					failed++
				}
				if opt.Progress != nil {
					opt.Progress(done, len(targets), failed)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range targets {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return results, nil
}

// resolveTarget turns one target into items, a per-target failure, or an error that should
// stop the whole import.
func resolveTarget(ctx context.Context, search ItemSearcher, t Target) (resolved, error) {
	rows, err := search.SearchItems(ctx, t.Name, t.WordType, provider.MaxItemsLimit)
	if err != nil {
		if ctx.Err() != nil {
			return resolved{}, ctx.Err()
		}
		c := provider.ClassOf(err)
		switch c {
		case provider.ClassConfig, provider.ClassMaintenance, provider.ClassBug, provider.ClassEndpoint:
			return resolved{}, fmt.Errorf("import stopped at %s (%q): %w", t.Where(), t.Name, err)
		}
		return resolved{failure: "search failed: " + err.Error(), temporary: c == provider.ClassTransient || c == provider.ClassRateLimited}, nil
	}
	if t.WordType == WordMatch {
		// Compare names ourselves rather than trusting the search to be exact.
		exact := rows[:0:0]
		for _, it := range rows {
			if it.ItemName == t.Name {
				exact = append(exact, it)
			}
		}
		rows = exact
	}
	if t.ItemID != "" {
		for _, it := range rows {
			if it.ItemID == t.ItemID {
				return resolved{items: []provider.Item{it}}, nil
			}
		}
		return resolved{failure: fmt.Sprintf("itemId %s is not among the %d items found (%s search)", t.ItemID, len(rows), t.WordType)}, nil
	}
	switch {
	case len(rows) == 0 && t.WordType == WordMatch:
		return resolved{failure: "no item has exactly this name"}, nil
	case len(rows) == 0:
		return resolved{failure: fmt.Sprintf("no item name %s this text", map[string]string{WordFront: "starts with", WordFull: "contains"}[t.WordType])}, nil
	case len(rows) > 1 && !t.All:
		return resolved{failure: fmt.Sprintf("ambiguous: %d items found (%s search): %s; pin one with itemId, or set all: true to import every match",
			len(rows), t.WordType, describe(rows))}, nil
	}
	r := resolved{items: rows}
	if len(rows) >= provider.MaxItemsLimit {
		r.warning = fmt.Sprintf("%d items found, the API's cap for one search: some may be missing; narrow the name", len(rows))
	}
	return r, nil
}

// describe lists candidates so the operator can pick one for itemId.
func describe(items []provider.Item) string {
	const show = 5
	var parts []string
	for i, it := range items {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(items)-show))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %q %s", it.ItemID, it.ItemName, it.ItemRarity))
	}
	return strings.Join(parts, ", ")
}
