package telemetry

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// One duration convention everywhere: zap.Duration fields are named *_seconds, and the
// encoder writes seconds.
func TestDurationFieldsCarryTheirUnit(t *testing.T) {
	re := regexp.MustCompile(`zap\.Duration\("([^"]*)"`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !strings.HasSuffix(m[1], "_seconds") {
				t.Errorf("%s: zap.Duration(%q): name duration fields *_seconds", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	log, err := NewLogger("info", "auto", &buf) // not a terminal: json
	if err != nil {
		t.Fatal(err)
	}
	log.Info("pass", zap.Duration("duration_seconds", 1500*time.Millisecond))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("auto off a terminal is not json: %q", buf.String())
	}
	if line["duration_seconds"] != 1.5 || line["caller"] == nil {
		t.Fatalf("line %v: want duration_seconds 1.5 and a caller", line)
	}
}
