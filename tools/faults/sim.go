package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// simClient drives the simulator's /_sim admin endpoints (internal/provider/neoplesim).
type simClient struct{ base string }

type catalogItem struct {
	ItemID   string `json:"itemId"`
	ItemName string `json:"itemName"`
}

type simFaults struct {
	Latency       string  `json:"latency"`
	ErrorRate     float64 `json:"error_rate"`
	MalformedRate float64 `json:"malformed_rate"`
	TimeoutRate   float64 `json:"timeout_rate"`
	OversizeRate  float64 `json:"oversize_rate"`

	HostileRate        float64 `json:"hostile_rate,omitempty"`
	FutureRate         float64 `json:"future_rate,omitempty"`
	AncientRate        float64 `json:"ancient_rate,omitempty"`
	ForeignRate        float64 `json:"foreign_rate,omitempty"`
	RetryAfterRate     float64 `json:"retry_after_rate,omitempty"`
	HostileMaintenance bool    `json:"hostile_maintenance,omitempty"`
}

type simStats struct {
	Requests int64                            `json:"requests"`
	Paths    map[string]int64                 `json:"paths"`
	Keys     map[string]struct{ Total int64 } `json:"keys"`
	Items    map[string]struct {
		Auction     int64 `json:"auction"`
		AuctionSold int64 `json:"auction_sold"`
	} `json:"items"`
	Maintenance int64 `json:"maintenance"`
	Faults      int64 `json:"faults"`
	raw         []byte
}

var adminHTTP = &http.Client{Timeout: 10 * time.Second}

func (s *simClient) do(ctx context.Context, method, path string, body any, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		return nil, err
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		return b, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return b, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return b, nil
}

func (s *simClient) catalog(ctx context.Context) ([]catalogItem, error) {
	var c struct{ Rows []catalogItem }
	_, err := s.do(ctx, http.MethodGet, "/_sim/catalog", nil, &c)
	return c.Rows, err
}

func (s *simClient) setFaults(ctx context.Context, f simFaults) error {
	_, err := s.do(ctx, http.MethodPost, "/_sim/faults", f, nil)
	return err
}

func (s *simClient) setLatency(ctx context.Context, d time.Duration) error {
	return s.setFaults(ctx, simFaults{Latency: d.String()})
}

func (s *simClient) maintenance(ctx context.Context, on bool) error {
	_, err := s.do(ctx, http.MethodPost, fmt.Sprintf("/_sim/maintenance?on=%t", on), nil, nil)
	return err
}

func (s *simClient) stats(ctx context.Context) (simStats, error) {
	var st simStats
	b, err := s.do(ctx, http.MethodGet, "/_sim/stats", nil, &st)
	st.raw = b
	return st, err
}

// reset: no faults, no maintenance, zero counters.
func (s *simClient) reset(ctx context.Context) error {
	if err := s.setFaults(ctx, simFaults{}); err != nil {
		return err
	}
	if err := s.maintenance(ctx, false); err != nil {
		return err
	}
	_, err := s.do(ctx, http.MethodDelete, "/_sim/stats", nil, nil)
	return err
}

// keyLabel is how the simulator names a key in its stats (neoplesim.KeyLabel).
func keyLabel(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:4])
}

// wrongTypeProxy sits in front of the simulator and answers a share of the auction requests
// with 200 and a well-formed JSON body of the wrong shape, which the simulator cannot do.
type wrongTypeProxy struct {
	srv     *http.Server
	url     string
	rewrote atomic.Int64
}

var wrongBodies = []string{
	`{"rows":{"auctionNo":1}}`,                                  // rows is an object
	`{"rows":[{"auctionNo":"one","unitPrice":"cheap"}]}`,        // numbers as strings
	`[{"auctionNo":1}]`,                                         // top level is an array
	`{"rows":[{"itemId":42,"count":-1,"regDate":"yesterday"}]}`, // wrong id type, bad date
	`{"row":[]}`, // no rows key
}

func startWrongTypeProxy(target string, rate float64) (*wrongTypeProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &wrongTypeProxy{url: "http://" + ln.Addr().String()}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 7))
	rp := httputil.NewSingleHostReverseProxy(u)
	// The client giving up on an injected timeout is expected; do not log it.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		roll, pick := rng.Float64(), rng.IntN(len(wrongBodies))
		mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/df/auction") && roll < rate {
			p.rewrote.Add(1)
			w.Header().Set("Content-Type", "application/json;charset=UTF-8")
			_, _ = io.WriteString(w, wrongBodies[pick])
			return
		}
		rp.ServeHTTP(w, r)
	})
	p.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *wrongTypeProxy) close() { _ = p.srv.Close() }
