package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

// scenarioSentinel: the whole run used keys containing h.sentinel. A few more runs make the
// key travel in the query string and fail in every way (connection refused, bad path, refused
// key, 5xx, malformed); then every process output, the simulator's stats and every row of
// every scenario database are searched for it.
func scenarioSentinel(ctx context.Context, h *harness, r *report) error {
	d, err := h.newDB(ctx, "sentinel")
	if err != nil {
		return err
	}
	items := h.catalog[:40]
	if err := d.insertDue(ctx, items, "COLD_10M"); err != nil {
		return err
	}
	dead, err := freePort()
	if err != nil {
		return err
	}
	query := "COLLECTOR_PROVIDER_KEY_IN=query"
	runs := []struct {
		name string
		env  []string
		// faults on the simulator during the run
		faults simFaults
	}{
		{"key-query-refused", []string{query, fmt.Sprintf("NEOPLE_API_BASE_URL=http://127.0.0.1:%d", dead)}, simFaults{}},
		{"key-query-badpath", []string{query, "NEOPLE_API_BASE_URL=" + h.simURL + "/no/such/prefix"}, simFaults{}},
		{"key-query-faults", []string{query}, simFaults{ErrorRate: 0.4, MalformedRate: 0.3, TimeoutRate: 0.05}},
		{"key-header-faults", nil, simFaults{ErrorRate: 0.4, MalformedRate: 0.3, TimeoutRate: 0.05}},
	}
	codes := map[string]int{}
	for _, run := range runs {
		if err := h.sim.setFaults(ctx, run.faults); err != nil {
			return err
		}
		if err := d.makeDue(ctx, items); err != nil {
			return err
		}
		env := append([]string{"COLLECTOR_PROVIDER_TIMEOUT=1s"}, run.env...)
		p, err := h.collectDue(ctx, d, "sentinel-"+run.name, env, "--lease", "5s")
		if err != nil {
			return err
		}
		// Any exit code is fine here; only what was printed and stored matters.
		code, err := p.wait(ctx, 2*time.Minute)
		if err != nil {
			return err
		}
		codes[run.name] = code
		if err := d.waitLeasesExpired(ctx, time.Minute); err != nil {
			return err
		}
	}
	if err := h.sim.setFaults(ctx, simFaults{}); err != nil {
		return err
	}

	// A simulator that does not know the key: refused with 401, the run stops with an error.
	other, err := h.startBin(ctx, h.simBin, "sim-other-keys", withoutKeys(h.env("")), "sim", "--addr", "127.0.0.1:0", "--items", "50")
	if err != nil {
		return err
	}
	otherURL, err := other.waitLog(ctx, 30*time.Second, regexp.MustCompile(`"base_url":"(http://[^"]+)"`))
	if err != nil {
		return fmt.Errorf("second simulator: %w", err)
	}
	if err := d.makeDue(ctx, items); err != nil {
		return err
	}
	for _, in := range []string{"header", "query"} {
		p, err := h.collectDue(ctx, d, "sentinel-refused-"+in, []string{"NEOPLE_API_BASE_URL=" + otherURL, "COLLECTOR_PROVIDER_KEY_IN=" + in})
		if err != nil {
			return err
		}
		code, err := p.wait(ctx, time.Minute)
		if err != nil {
			return err
		}
		r.check(code != 0, "collect-due with a refused key (%s) exited 0", in)
		codes["refused-"+in] = code
	}

	// The key was really used: the simulator counted requests under its label.
	st, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	r.check(st.Keys[keyLabel(h.marketKey)].Total > 0, "the simulator saw no request with the sentinel market key")

	needles := [][]byte{[]byte(h.sentinel), []byte(url.QueryEscape(h.sentinel))}
	files, bytesScanned, fileHits, err := scanDir(h.dir, needles)
	if err != nil {
		return err
	}
	r.check(len(fileHits) == 0, "sentinel found in process output: %v", fileHits)
	r.check(files > 0 && bytesScanned > 0, "no output scanned")
	r.check(!containsAny(st.raw, needles), "sentinel found in GET /_sim/stats")
	rowsScanned, dbHits, err := h.scanDatabases(ctx, h.sentinel)
	if err != nil {
		return err
	}
	// Positive controls: the same scans do find what is there (the key's label in the
	// simulator's log, an item id in the database), so zero hits above means something.
	_, _, labelHits, err := scanDir(h.dir, [][]byte{[]byte(keyLabel(h.marketKey))})
	if err != nil {
		return err
	}
	_, idHits, err := h.scanDatabases(ctx, items[0].ItemID)
	if err != nil {
		return err
	}
	r.check(len(labelHits) > 0 && len(idHits) > 0, "positive controls failed: key label in %d outputs, item id in %d tables", len(labelHits), len(idHits))
	r.check(len(dbHits) == 0, "sentinel found in the database: %v", dbHits)
	r.check(!panicked(h.dir), "a process panicked (see logs)")
	r.num("sentinel runs exit %v", codes)
	r.num("scanned %d process outputs (%d KiB), /_sim/stats, %d rows in %d databases: %d hits",
		files, bytesScanned>>10, rowsScanned, len(h.dbs)-1, len(fileHits)+len(dbHits))
	return nil
}

func withoutKeys(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !bytes.HasPrefix([]byte(kv), []byte("NEOPLE_")) {
			out = append(out, kv)
		}
	}
	return out
}

func containsAny(b []byte, needles [][]byte) bool {
	for _, n := range needles {
		if bytes.Contains(b, n) {
			return true
		}
	}
	return false
}

// scanDir searches every captured output for the needles.
func scanDir(dir string, needles [][]byte) (files int, size int64, hits []string, err error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return 0, 0, nil, err
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, 0, nil, err
		}
		files++
		size += int64(len(b))
		if containsAny(b, needles) {
			hits = append(hits, filepath.Base(p))
		}
	}
	return files, size, hits, nil
}

// scanDatabases searches the text form of every row of every table of every scenario database.
func (h *harness) scanDatabases(ctx context.Context, needle string) (rows int, hits []string, err error) {
	for _, d := range h.dbs {
		if d.pool == nil {
			continue // the template: nothing ran against it
		}
		trows, err := d.pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
		if err != nil {
			return 0, nil, fmt.Errorf("list tables of %s: %w", d.name, err)
		}
		tables, err := pgx.CollectRows(trows, pgx.RowTo[string])
		if err != nil {
			return 0, nil, fmt.Errorf("list tables of %s: %w", d.name, err)
		}
		for _, t := range tables {
			var n, hit int
			q := fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE strpos(x::text, $1) > 0) FROM %s x`, pgx.Identifier{t}.Sanitize())
			if err := d.pool.QueryRow(ctx, q, needle).Scan(&n, &hit); err != nil {
				return 0, nil, fmt.Errorf("scan %s.%s: %w", d.name, t, err)
			}
			rows += n
			if hit > 0 {
				hits = append(hits, fmt.Sprintf("%s.%s (%d rows)", d.name, t, hit))
			}
		}
	}
	return rows, hits, nil
}

var panicRE = regexp.MustCompile(`(?m)^(panic: |fatal error: |goroutine \d+ \[)`)

// panicked reports whether any captured output holds a Go panic or fatal error.
func panicked(dir string) bool {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		if panicRE.Match(b) {
			return true
		}
	}
	return false
}
