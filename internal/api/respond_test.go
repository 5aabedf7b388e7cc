package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// writesRecorder keeps each Write apart.
type writesRecorder struct{ writes [][]byte }

func (w *writesRecorder) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// TestWriteParts: /latest's chunks go out gathered into few writes, byte for byte, with a
// piece larger than the gathering buffer cut into writes of its size, each after a call of
// before (which moves the write deadline on).
func TestWriteParts(t *testing.T) {
	var parts [][]byte
	for i := range 600 {
		parts = append(parts, bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i))
	}
	parts = append(parts[:300], append([][]byte{bytes.Repeat([]byte{'!'}, 200<<10)}, parts[300:]...)...)
	var rec writesRecorder
	befores := 0
	writeParts(&rec, parts, func() { befores++ })
	if befores != len(rec.writes) {
		t.Fatalf("%d calls of before for %d writes", befores, len(rec.writes))
	}
	if got, want := bytes.Join(rec.writes, nil), bytes.Join(parts, nil); !bytes.Equal(got, want) {
		t.Fatalf("wrote %d bytes that differ from the %d of the parts", len(got), len(want))
	}
	if len(rec.writes) > 20 {
		t.Fatalf("%d writes for %d parts: they were not gathered", len(rec.writes), len(parts))
	}
	for i, w := range rec.writes {
		if len(w) > 64<<10 {
			t.Fatalf("write %d is %d bytes, more than the 64 KB gathering buffer", i, len(w))
		}
	}
}

// An answer that cannot be encoded is the server's fault and the same request repeats it: 500
// without Retry-After, not a 503 that tells clients to retry.
func TestAnAnswerThatCannotBeEncodedIs500(t *testing.T) {
	a := &API{cfg: Config{Now: time.Now}, log: zaptest.NewLogger(t)}
	rec := httptest.NewRecorder()
	// encoding/json refuses a time whose year has five digits.
	a.answer(rec, httptest.NewRequest(http.MethodGet, Prefix+"items", nil), struct{ At time.Time }{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "encode the test")
	var p problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusInternalServerError ||
		p.Type != typeBase+probInternal || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("%d, Retry-After %q, %s (%v); want 500, none, an internal-error problem", rec.Code, rec.Header().Get("Retry-After"), rec.Body, err)
	}
}
