package export_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// duckdbVersion is the DuckDB Node API the tests read exports with; .ci/run installs the same.
const duckdbVersion = "@duckdb/node-api@1.5.6-r.1"

var (
	duckdbOnce sync.Once
	duckdbDir  string
	duckdbErr  string
)

// duckdbInstall installs DuckDB's Node API once, outside the repository (in Go's build
// cache), and returns its directory. Without node or npm, or when the install fails, the test
// skips saying why, except under CI, where it fails.
func duckdbInstall(t *testing.T) string {
	t.Helper()
	duckdbOnce.Do(func() {
		if _, err := exec.LookPath("node"); err != nil {
			duckdbErr = "node is not on PATH"
			return
		}
		cache, err := exec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			duckdbErr = "go env GOCACHE: " + err.Error()
			return
		}
		dir := filepath.Join(strings.TrimSpace(string(cache)), "duckdb-node")
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@duckdb", "node-api", "package.json")); err == nil {
			duckdbDir = dir
			return
		}
		if _, err := exec.LookPath("npm"); err != nil {
			duckdbErr = "npm is not on PATH to install " + duckdbVersion
			return
		}
		if out, err := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", dir, duckdbVersion).CombinedOutput(); err != nil {
			duckdbErr = "npm install " + duckdbVersion + ": " + err.Error() + "\n" + string(out)
			return
		}
		duckdbDir = dir
	})
	if duckdbErr != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("DuckDB is required under CI to read the exports back (.ci/run installs it): %s", duckdbErr)
		}
		t.Skipf("no DuckDB to read the exports back: %s", duckdbErr)
	}
	return duckdbDir
}

// duckdbScript reads one day's export with DuckDB and prints, per table, its row count and
// the figures the tests compare with the database: sums, the first row's values, and the
// column types DuckDB inferred.
const duckdbScript = `
const { createRequire } = require('module');
const req = createRequire(process.argv[2] + '/package.json');
const { DuckDBInstance } = req('@duckdb/node-api');
const [dir, ext] = [process.argv[3], process.argv[4]];
const read = t => ext === 'parquet' ? "read_parquet('" + dir + "/" + t + ".parquet')" : "read_csv('" + dir + "/" + t + ".csv', header = true)";
const queries = {
  auction_snapshots: "SELECT count(*)::VARCHAR AS rows, sum(lowest_unit_price)::VARCHAR AS sum_lowest, " +
    "first(item_id ORDER BY item_id, collected_at) AS first_item, " +
    "first(epoch_us(collected_at)::VARCHAR ORDER BY item_id, collected_at) AS first_at, " +
    "first(lowest_unit_price::VARCHAR ORDER BY item_id, collected_at) AS first_lowest, " +
    "first(weighted_unit_price ORDER BY item_id, collected_at) AS first_weighted, " +
    "count(sales_vwap)::VARCHAR AS with_vwap FROM ",
  auction_sales: "SELECT count(*)::VARCHAR AS rows, sum(unit_price)::VARCHAR AS sum_unit, " +
    "max(epoch_us(sold_at))::VARCHAR AS last_at FROM ",
  price_candles: "SELECT count(*)::VARCHAR AS rows, count(*) FILTER (resolution = '1d')::VARCHAR AS daily, " +
    "sum(close_price)::VARCHAR AS sum_close FROM ",
};
(async () => {
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  const out = {};
  for (const [t, q] of Object.entries(queries)) {
    out[t] = (await c.runAndReadAll(q + read(t))).getRowObjectsJson()[0];
    for (const col of (await c.runAndReadAll('DESCRIBE SELECT * FROM ' + read(t))).getRowObjectsJson()) {
      out[t]['type_' + col.column_name] = col.column_type;
    }
  }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
`

// duckdbRead reads the export in dir with DuckDB: table → figure → value, as DuckDB prints it.
func duckdbRead(t *testing.T, dir, format string) map[string]map[string]any {
	t.Helper()
	install := duckdbInstall(t)
	script := filepath.Join(t.TempDir(), "read.cjs")
	if err := os.WriteFile(script, []byte(duckdbScript), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", script, install, dir, format).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("DuckDB read of the %s export: %v\n%s", format, err, stderr)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("DuckDB's answer: %v\n%s", err, out)
	}
	return got
}
