package neoplesim

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// HostileText is provider text that must never poison a log, an error or a write.
type HostileText struct {
	Name string
	Text string
}

// HostileTexts are what a provider, a proxy in front of it or a maintenance page can send:
// NUL bytes, an EUC-KR page, gzip bytes served as plain text, and a 20,000-character Korean
// message.
func HostileTexts() []HostileText {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"error":{"status":503,"code":"DNF980","message":"SYSTEM_INSPECT"}}`))
	_ = zw.Close()
	return []HostileText{
		{"nul", "SYSTEM\x00INSPECT\x00"},
		// "점검 중입니다" (maintenance in progress) in EUC-KR.
		{"euc-kr", "\xc1\xa1\xb0\xcb \xc1\xdf\xc0\xd4\xb4\xcf\xb4\xd9"},
		{"gzip", gz.String()},
		{"long-korean", strings.Repeat("점검", 10000)},
	}
}

// HostileEnvelope is a Neople error body whose message holds text byte for byte: only what
// JSON cannot carry raw (controls, quote, backslash) is escaped, so NUL arrives as \u0000 and
// EUC-KR or gzip bytes arrive as they are.
func HostileEnvelope(status int, code, text string) []byte {
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return []byte(fmt.Sprintf(`{"error":{"status":%d,"code":%q,"message":"%s"}}`, status, code, b.String()))
}

// writeHostile answers with one of HostileTexts, as a 404 DNF003 envelope (an item failure)
// or a raw 502 body (a proxy's page), by turns.
func (s *Server) writeHostile(w http.ResponseWriter) {
	texts := HostileTexts()
	s.mu.Lock()
	n := s.rng.IntN(2 * len(texts))
	s.mu.Unlock()
	text := texts[n/2].Text
	if n%2 == 0 {
		writeRaw(w, http.StatusNotFound, HostileEnvelope(http.StatusNotFound, "DNF003", text))
		return
	}
	writeRaw(w, http.StatusBadGateway, []byte(text))
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// impossibleRows re-encodes a {"rows":[...]} body with the fault applied: an extra row dated
// 2099 or 2001 (a copy of the first, its sale or registration date changed), or every row's
// itemId replaced by one nobody asked for.
func impossibleRows(body any, fault string) []byte {
	raw, _ := json.Marshal(body)
	var env map[string]any
	if json.Unmarshal(raw, &env) != nil {
		return raw
	}
	rows, _ := env["rows"].([]any)
	switch fault {
	case "foreign":
		for _, r := range rows {
			if m, ok := r.(map[string]any); ok {
				m["itemId"] = "f0reign0000000000000000000000000"
			}
		}
	default:
		date := "2099-01-01 00:00:00"
		if fault == "ancient" {
			date = "2001-01-01 00:00:00"
		}
		if len(rows) > 0 {
			if first, ok := rows[0].(map[string]any); ok {
				extra := map[string]any{}
				for k, v := range first {
					extra[k] = v
				}
				for _, k := range []string{"soldDate", "regDate"} {
					if _, ok := extra[k]; ok {
						extra[k] = date
					}
				}
				rows = append([]any{extra}, rows...)
			}
		}
	}
	env["rows"] = rows
	out, _ := json.Marshal(env)
	return out
}
