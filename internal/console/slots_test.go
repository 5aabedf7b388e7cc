package console

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The pages that read the database hold one of MaxReads slots: with all taken, a request gets
// 503 with Retry-After within readWait instead of a pooled connection, and reads once one frees.
func TestReadPagesWaitForASlotThenAnswer503(t *testing.T) {
	defer func(d int64) { readWait.Store(d) }(readWait.Load())
	readWait.Store(int64(20 * time.Millisecond))
	c, err := New(nil, Config{Session: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range MaxReads {
		c.readSlots <- struct{}{}
	}
	h := c.Handler()
	for _, path := range []string{"/items", "/items/x", "/items/x/chart.json"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Errorf("GET %s with every read slot taken: %d %q, want 503 with Retry-After", path, w.Code, w.Body.String())
		}
	}
	<-c.readSlots
	ran := false
	w := httptest.NewRecorder()
	c.slotted(func(http.ResponseWriter, *http.Request) { ran = true })(w, httptest.NewRequest(http.MethodGet, "/items", nil))
	if !ran || len(c.readSlots) != MaxReads-1 {
		t.Fatalf("with a slot free: ran %v, %d slots taken after; want it run and its slot given back", ran, len(c.readSlots))
	}
}
