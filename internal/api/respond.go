package api

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// body is one encoded answer: its JSON, its gzip (made on the way out when nil) and the
// validators a client sends back to learn that nothing changed.
type body struct {
	raw      []byte
	gz       []byte
	etag     string
	modified time.Time // zero: no Last-Modified
	// ambiguous: an earlier answer was dated in the same second, so If-Modified-Since naming
	// that second cannot tell which one the client holds, and gets the answer again. HTTP
	// dates have a one-second resolution; /latest changes every half second while items are
	// collected.
	ambiguous bool
}

// newBody hashes the JSON into a weak ETag: weak because the gzip and identity encodings
// carry the same data, and If-None-Match compares weakly anyway.
func newBody(raw []byte, modified time.Time) *body {
	sum := sha256.Sum256(raw)
	return &body{raw: raw, etag: `W/"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`, modified: modified}
}

// jsonBody encodes v as a body.
func jsonBody(v any, modified time.Time) (*body, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return newBody(raw, modified), nil
}

// gzipMin is the size below which compressing costs more than it saves.
const gzipMin = 1024

// gzipWriters keeps compressors between answers: a new one allocates about a megabyte of
// tables, which cost a series answer more than compressing it (and the garbage collector the
// rest).
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return zw
}}

func compress(raw []byte) []byte {
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&buf)
	_, _ = zw.Write(raw)
	_ = zw.Close()
	zw.Reset(io.Discard) // holds no answer while pooled
	gzipWriters.Put(zw)
	return buf.Bytes()
}

// serve answers with b, or 304 Not Modified when the client's copy is current: If-None-Match
// decides when sent, else If-Modified-Since (RFC 9110 §13.2.2).
func serve(w http.ResponseWriter, r *http.Request, b *body) {
	h := w.Header()
	h.Set("ETag", b.etag)
	// Caches may keep the answer but must ask again each time: the ETag makes asking cheap.
	h.Set("Cache-Control", "no-cache")
	h.Add("Vary", "Accept-Encoding")
	if !b.modified.IsZero() {
		h.Set("Last-Modified", b.modified.UTC().Format(http.TimeFormat))
	}
	if notModified(r, b) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	out := b.raw
	if len(b.raw) >= gzipMin && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		out = b.gz
		if out == nil {
			out = compress(b.raw)
		}
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(out)
	}
}

func notModified(r *http.Request, b *body) bool {
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		for tag := range strings.SplitSeq(inm, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" || strings.TrimPrefix(tag, "W/") == strings.TrimPrefix(b.etag, "W/") {
				return true
			}
		}
		return false
	}
	if ims := r.Header.Get("If-Modified-Since"); ims != "" && !b.modified.IsZero() {
		t, err := http.ParseTime(ims)
		lm := b.modified.Truncate(time.Second)
		return err == nil && !lm.After(t) && !(b.ambiguous && lm.Equal(t))
	}
	return false
}

// acceptsGzip reads Accept-Encoding: gzip with a q-value above 0, or else * with one; gzip
// named outright decides over * (RFC 9110 §12.5.3).
func acceptsGzip(ae string) bool {
	star := -1.0
	for part := range strings.SplitSeq(ae, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name != "gzip" && name != "*" {
			continue
		}
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(k, "q") {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
		}
		if name == "gzip" {
			return q > 0
		}
		star = q
	}
	return star > 0
}
