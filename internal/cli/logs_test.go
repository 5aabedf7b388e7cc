package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// jsonLines fails unless every non-empty line of s is a JSON object; it returns them.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("stderr line is not JSON: %q\nall of stderr:\n%s", line, s)
		}
		out = append(out, m)
	}
	return out
}

// With json logs every stderr line is JSON, fatal start-up errors included, whether the
// format came from the flag, the environment, or the default for a non-terminal stderr.
func TestFatalStartupErrorIsJSON(t *testing.T) {
	t.Setenv("COLLECTOR_CONFIG", "")
	unreachable := "postgres://postgres@127.0.0.1:1/nope?connect_timeout=2"
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"flag", nil, []string{"status", "--database-url", unreachable, "--log-format", "json"}, "127.0.0.1:1/nope"},
		{"default off a terminal", nil, []string{"status", "--database-url", unreachable}, "127.0.0.1:1/nope"},
		{"bad config, format from env", map[string]string{"COLLECTOR_LOG_FORMAT": "json", "COLLECTOR_COLLECT_CONCURRENCY": "0"},
			[]string{"status"}, "collect.concurrency"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			code := execute(context.Background(), c.args, &out, &errOut)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, errOut.String())
			}
			lines := jsonLines(t, errOut.String())
			last := lines[len(lines)-1]
			if last["msg"] != "command failed" || last["level"] != "error" || !strings.Contains(last["error"].(string), c.want) {
				t.Fatalf("last line %v: want msg \"command failed\" with an error naming %q", last, c.want)
			}
			if _, ok := last["caller"]; !ok {
				t.Fatalf("no caller field: %v", last)
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := execute(context.Background(), []string{"status", "--database-url", unreachable, "--log-format", "console"}, &out, &errOut); code != 1 ||
		!strings.HasPrefix(errOut.String(), "error: ") {
		t.Fatalf("console: exit %d, stderr %q", code, errOut.String())
	}
}
