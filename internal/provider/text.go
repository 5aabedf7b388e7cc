package provider

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Caps on provider text by runes, so a Korean message is never cut inside a character.
const (
	// MaxMessageRunes bounds a provider message or a body quoted in an error.
	MaxMessageRunes = 200
	// MaxErrorRunes bounds an error stored or logged whole (last_error, status and cool-down reasons).
	MaxErrorRunes = 500
	// MaxNameRunes bounds names and enum-like fields parsed from rows.
	MaxNameRunes = 200
)

// Clean is the one boundary for text that came from the provider or a client (or quotes it) before it
// reaches a log, an error or the database: NUL bytes are removed, invalid UTF-8 (an EUC-KR
// maintenance page, gzip bytes) and other control characters become U+FFFD, and the result is
// capped at maxRunes runes, ending in "…" when cut. maxRunes <= 0 means no cap.
func Clean(s string, maxRunes int) string {
	if isClean(s, maxRunes) {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), 4*max(maxRunes, 0)+3))
	n := 0
	prevBad := false
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r == 0 {
			continue
		}
		bad := r == utf8.RuneError || (unicode.IsControl(r) && r != '\n' && r != '\t')
		if bad && prevBad {
			continue // one replacement for a run of unreadable bytes
		}
		prevBad = bad
		if maxRunes > 0 && n == maxRunes {
			b.WriteString("…")
			break
		}
		if bad {
			r = utf8.RuneError
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// isClean is Clean's fast path: most provider text is short, valid and printable.
func isClean(s string, maxRunes int) bool {
	if maxRunes > 0 && len(s) > maxRunes && utf8.RuneCountInString(s) > maxRunes {
		return false
	}
	for _, r := range s {
		if r == 0 || r == utf8.RuneError || (unicode.IsControl(r) && r != '\n' && r != '\t') {
			return false
		}
	}
	return true
}
