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

	"github.com/duecollector/duecollector/internal/httpserve"
	"github.com/duecollector/duecollector/internal/store"
)

// body is one encoded answer: its JSON (its gzip made on the way out unless kept) and the
// validators a client sends back to learn that nothing changed.
type body struct {
	raw []byte
	// rawParts and gzParts, when set, are the answer in pieces and rawLen and gzLen their
	// sizes: /latest serves its chunks as they are kept instead of copying megabytes into one
	// slice at every refresh, garbage the collector would take from the polls' cores.
	rawParts, gzParts [][]byte
	rawLen, gzLen     int
	etag              string
	modified          time.Time // zero: no Last-Modified
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
	return &body{raw: raw, etag: weakETag(sum[:]), modified: modified}
}

// weakETag is the ETag of an answer whose SHA-256 is sum.
func weakETag(sum []byte) string {
	return `W/"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`
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
	if s := store.ServedFrom(r.Context()); s != nil {
		h.Set("Read-Source", s.String())
	}
	if notModified(r, b) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	size, parts := len(b.raw), [][]byte{b.raw}
	if b.rawParts != nil {
		size, parts = b.rawLen, b.rawParts
	}
	if size >= gzipMin && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		switch {
		case b.gzParts != nil:
			size, parts = b.gzLen, b.gzParts
		default:
			gz := compress(b.raw)
			size, parts = len(gz), [][]byte{gz}
		}
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(size))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	end := time.Now().Add(writeTime(size))
	writeParts(w, parts, func() {
		// Errors only where the writer cannot set deadlines (a test's recorder).
		_ = rc.SetWriteDeadline(earliest(end, time.Now().Add(stallLimit)))
	})
}

// slowReader is the slowest client an answer waits for: a full /latest (35 MB of JSON at
// 100,000 items) would outlast the server's write timeout (httpserve.WriteTimeout) on a slow
// line.
const slowReader = 64 << 10 // bytes a second

// stallLimit is how long one write of an answer may wait for the client to read. A reader
// that reads nothing keeps its connection, its goroutine and the /latest copy it was sent
// (megabytes, replaced every half second while items are collected); the whole answer's
// writeTime alone let one that never reads hold them for minutes.
var stallLimit = 15 * time.Second

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// writeTime is how long an answer of size bytes may take to write.
func writeTime(size int) time.Duration {
	return httpserve.WriteTimeout + time.Duration(size/slowReader)*time.Second
}

// writeScratch holds the buffers writeParts gathers pieces in.
var writeScratch = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// writeParts writes parts in writes of at most 64 KB, gathering small ones (/latest's 600
// chunks written one by one would each be a system call), and calls before each write
// before (which moves the write deadline on).
func writeParts(w io.Writer, parts [][]byte, before func()) {
	bp := writeScratch.Get().(*[]byte)
	buf := (*bp)[:0]
	defer func() { *bp = buf[:0]; writeScratch.Put(bp) }()
	write := func(p []byte) bool {
		for len(p) > 0 {
			n := min(len(p), cap(buf))
			before()
			if _, err := w.Write(p[:n]); err != nil {
				return false
			}
			p = p[n:]
		}
		return true
	}
	for _, p := range parts {
		if len(buf)+len(p) > cap(buf) {
			if !write(buf) {
				return
			}
			buf = buf[:0]
		}
		if len(p) >= cap(buf) {
			if !write(p) {
				return
			}
			continue
		}
		buf = append(buf, p...)
	}
	write(buf)
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
