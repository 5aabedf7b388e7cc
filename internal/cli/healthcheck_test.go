package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestHealthcheckExitCodes(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "database schema is behind", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	}))
	defer srv.Close()
	t.Setenv("COLLECTOR_CONFIG", "")

	out, _, err := runCollector(t, "healthcheck", "--url", srv.URL+"/readyz")
	if err != nil || exitCode(err) != 0 || !strings.Contains(out, "200 OK") {
		t.Fatalf("ready: err %v, out %q", err, out)
	}
	ready.Store(false)
	_, _, err = runCollector(t, "healthcheck", "--url", srv.URL+"/readyz")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "schema is behind") {
		t.Fatalf("not ready: exit %d, err %v", exitCode(err), err)
	}
	srv.Close()
	_, _, err = runCollector(t, "healthcheck", "--url", srv.URL+"/readyz")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "unhealthy") {
		t.Fatalf("nothing listening: exit %d, err %v", exitCode(err), err)
	}
	_, _, err = runCollector(t, "healthcheck", "--url", "http://127.0.0.1:1/readyz")
	if exitCode(err) != 1 {
		t.Fatalf("refused: exit %d, err %v", exitCode(err), err)
	}
	if u, err := readyzURL(":9090"); err != nil || u != "http://127.0.0.1:9090/readyz" {
		t.Fatalf("readyzURL(:9090) = %q, %v", u, err)
	}
}
