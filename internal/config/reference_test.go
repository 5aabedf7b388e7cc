package config

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// referenceDoc is the configuration reference that must list every key.
const referenceDoc = "../../docs/configuration.md"

// docRow is one key's row in the reference: | `key` | `ENV`… | flag | `default` | meaning |.
type docRow struct {
	line               int
	env, dflt, meaning string
}

func readReference(t *testing.T) map[string]docRow {
	t.Helper()
	b, err := os.ReadFile(referenceDoc)
	if err != nil {
		t.Fatalf("read the configuration reference: %v", err)
	}
	rows := map[string]docRow{}
	for i, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.TrimSpace(line), "|")
		cells = cells[1 : len(cells)-1] // outside the leading and trailing pipe
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		key := strings.Trim(cells[0], "`")
		if !strings.Contains(key, ".") { // the secrets table: env vars, not keys
			continue
		}
		if len(cells) != 5 {
			t.Errorf("%s:%d: row for %s has %d cells, want 5 (key, environment, flag, default, meaning)", referenceDoc, i+1, key, len(cells))
			continue
		}
		if prev, dup := rows[key]; dup {
			t.Errorf("%s:%d: %s is listed twice (also line %d)", referenceDoc, i+1, key, prev.line)
		}
		rows[key] = docRow{line: i + 1, env: cells[1], dflt: cells[3], meaning: cells[4]}
	}
	return rows
}

// changeMark starts the sentence of every key's row that says when an operator should change
// it: a key nobody needs to turn is a constant, not a key.
const changeMark = "**Change:**"

// docDefault is how the reference writes a key's default.
func docDefault(v any) string {
	rv := reflect.ValueOf(v)
	switch {
	case v == "":
		return "`\"\"`"
	case rv.Kind() == reflect.Slice && rv.Len() == 0:
		return "`[]`"
	case rv.Kind() == reflect.Map && rv.Len() == 0:
		return "`{}`"
	}
	return fmt.Sprintf("`%v`", v)
}

// Every key the code knows is documented with its environment variable and its true default,
// and the reference names no key the code does not know: docs/configuration.md stays true.
func TestReferenceListsEveryKey(t *testing.T) {
	rows := readReference(t)
	keys := Keys()
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	// Issue 37 brought the keys down from 125 to 100; a tuning knob nobody should turn is a
	// constant, so a new key has to make room.
	if len(names) > 100 {
		t.Errorf("%d configuration keys; at most 100: make a knob only a benchmark turns a constant", len(names))
	}

	var missing []string
	for _, k := range names {
		want := docDefault(keys[k])
		row, ok := rows[k]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("| `%s` | `%s` | | %s | TODO |", k, EnvName(k), want))
		case !strings.Contains(row.env, "`"+EnvName(k)+"`"):
			t.Errorf("%s:%d: %s: environment cell %q lacks `%s`", referenceDoc, row.line, k, row.env, EnvName(k))
		case row.dflt != want:
			t.Errorf("%s:%d: %s: default cell is %s, the code's default is %s", referenceDoc, row.line, k, row.dflt, want)
		case !strings.Contains(row.meaning, changeMark):
			t.Errorf("%s:%d: %s: the meaning does not say when an operator should change it (%s …)", referenceDoc, row.line, k, changeMark)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s lacks %d keys; add rows like these to their section:\n%s", referenceDoc, len(missing), strings.Join(missing, "\n"))
	}
	for k, row := range rows {
		if _, ok := keys[k]; !ok {
			t.Errorf("%s:%d: documents %s, which is not a configuration key (removed or renamed?)", referenceDoc, row.line, k)
		}
	}
}
