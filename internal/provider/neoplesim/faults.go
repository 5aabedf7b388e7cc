package neoplesim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Faults are injected into /df requests that pass the key and rate checks. Rates are
// probabilities in [0, 1]; at most one fault applies to a request.
type Faults struct {
	Latency       time.Duration
	ErrorRate     float64 // 500 DNF999
	MalformedRate float64 // 200 with a truncated JSON body
	TimeoutRate   float64 // no answer until the client gives up (at most 30 s)
	OversizeRate  float64 // 200 with a valid body of OversizeBytes
	// HostileRate: an error whose text is one of HostileTexts (NUL, EUC-KR, gzip bytes, long
	// Korean), as a 404 DNF003 envelope or a raw 502 body by turns.
	HostileRate float64
	FutureRate  float64 // 200 with an extra row dated 2099 (a sale, or a listing's regDate)
	AncientRate float64 // 200 with an extra row dated 2001, before the game existed
	ForeignRate float64 // 200 whose rows all carry another item's id
	// RetryAfterRate: 429 API002 with Retry-After: 999999999 (about 31 years).
	RetryAfterRate float64
	// HostileMaintenance: maintenance answers carry NUL and EUC-KR bytes in their message.
	HostileMaintenance bool
}

// OversizeBytes is the size of an oversized body: above the client's default 8 MiB cap.
const OversizeBytes = 9 << 20

type faultsJSON struct {
	Latency            string  `json:"latency"`
	ErrorRate          float64 `json:"error_rate"`
	MalformedRate      float64 `json:"malformed_rate"`
	TimeoutRate        float64 `json:"timeout_rate"`
	OversizeRate       float64 `json:"oversize_rate"`
	HostileRate        float64 `json:"hostile_rate"`
	FutureRate         float64 `json:"future_rate"`
	AncientRate        float64 `json:"ancient_rate"`
	ForeignRate        float64 `json:"foreign_rate"`
	RetryAfterRate     float64 `json:"retry_after_rate"`
	HostileMaintenance bool    `json:"hostile_maintenance"`
}

// MarshalJSON writes latency as a duration string ("50ms").
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{f.Latency.String(), f.ErrorRate, f.MalformedRate, f.TimeoutRate, f.OversizeRate,
		f.HostileRate, f.FutureRate, f.AncientRate, f.ForeignRate, f.RetryAfterRate, f.HostileMaintenance})
}

// UnmarshalJSON reads {"latency":"50ms","error_rate":0.1,...}; omitted fields are zero.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var j faultsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var lat time.Duration
	if j.Latency != "" {
		var err error
		if lat, err = time.ParseDuration(j.Latency); err != nil || lat < 0 {
			return fmt.Errorf("latency %q: want a duration such as 50ms", j.Latency)
		}
	}
	for name, r := range map[string]float64{"error_rate": j.ErrorRate, "malformed_rate": j.MalformedRate,
		"timeout_rate": j.TimeoutRate, "oversize_rate": j.OversizeRate, "hostile_rate": j.HostileRate,
		"future_rate": j.FutureRate, "ancient_rate": j.AncientRate, "foreign_rate": j.ForeignRate,
		"retry_after_rate": j.RetryAfterRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("%s %v: want a probability in [0, 1]", name, r)
		}
	}
	*f = Faults{lat, j.ErrorRate, j.MalformedRate, j.TimeoutRate, j.OversizeRate,
		j.HostileRate, j.FutureRate, j.AncientRate, j.ForeignRate, j.RetryAfterRate, j.HostileMaintenance}
	return nil
}

// SetFaults replaces every fault setting, latency included.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Faults returns the current fault settings.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

func (s *Server) pickFault(f Faults) string {
	if f.ErrorRate+f.MalformedRate+f.TimeoutRate+f.OversizeRate+f.HostileRate+f.FutureRate+f.AncientRate+
		f.ForeignRate+f.RetryAfterRate == 0 {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	roll := s.rng.Float64()
	for _, c := range []struct {
		name string
		p    float64
	}{{"timeout", f.TimeoutRate}, {"error", f.ErrorRate}, {"malformed", f.MalformedRate}, {"oversize", f.OversizeRate},
		{"hostile", f.HostileRate}, {"future", f.FutureRate}, {"ancient", f.AncientRate}, {"foreign", f.ForeignRate},
		{"retry_after", f.RetryAfterRate}} {
		if roll < c.p {
			s.stats.Faults++
			return c.name
		}
		roll -= c.p
	}
	return ""
}

func writeOversize(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	pad := []byte(strings.Repeat("x", 64<<10))
	_, _ = w.Write([]byte(`{"rows":[],"pad":"`))
	for n := 0; n < OversizeBytes; n += len(pad) {
		if _, err := w.Write(pad); err != nil {
			return
		}
	}
	_, _ = w.Write([]byte(`"}`))
}

func (s *Server) adminFaults(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var f Faults
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&f); err != nil {
			http.Error(w, "faults: "+err.Error(), http.StatusBadRequest)
			return
		}
		s.SetFaults(f)
	}
	writeJSON(w, http.StatusOK, s.Faults())
}
