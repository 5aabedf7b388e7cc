package telemetry

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
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

// The daemon logs from many goroutines into whatever writer it was given; a plain buffer must
// come out whole, one JSON line per entry (go test -race fails here without the lock).
func TestLoggerSerialisesWritesToAnyWriter(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger("info", "json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	const writers, lines = 8, 50
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range lines {
				log.Info("line", zap.Int("writer", i), zap.Int("n", j))
			}
		}()
	}
	wg.Wait()
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines, want %d", len(got), writers*lines)
	}
	for _, l := range got {
		if !json.Valid([]byte(l)) {
			t.Fatalf("torn line %q", l)
		}
	}
}

// An instance's name is host:pid and a random suffix, the same for the whole process:
// containers sharing the host's name are all pid 1, and their names must still differ.
func TestInstanceIsHostPidAndASuffix(t *testing.T) {
	host, _ := os.Hostname()
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(host) + `:` + strconv.Itoa(os.Getpid()) + `-[0-9a-f]{8}$`)
	if got := Instance(); !re.MatchString(got) {
		t.Fatalf("Instance() = %q, want host:pid-xxxxxxxx", got)
	}
	if first, again := Instance(), Instance(); first != again {
		t.Fatalf("Instance() changed within one process: %q, then %q", first, again)
	}
}
