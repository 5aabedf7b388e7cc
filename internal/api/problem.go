package api

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// problem is an RFC 9457 problem detail. Type names the class of problem, documented under
// docs/api.md#problems; Detail says what was wrong with this request.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Param is the query or path parameter at fault, for bad-parameter problems.
	Param string `json:"param,omitempty"`
}

// The problem types, each a section of docs/api.md.
const (
	typeBase         = "https://github.com/duecollector/duecollector/blob/main/docs/api.md#"
	probBadParameter = "bad-parameter"
	probNotFound     = "not-found"
	probUnauthorized = "unauthorized"
	probRateLimited  = "rate-limited"
	probMethod       = "method-not-allowed"
	probUnavailable  = "unavailable"
	probInternal     = "internal-error"
)

// writeProblem answers with a problem. Detail must never hold a secret or raw SQL error text.
func writeProblem(w http.ResponseWriter, status int, typ, detail, param string) {
	b, _ := json.Marshal(problem{Type: typeBase + typ, Title: http.StatusText(status), Status: status, Detail: detail, Param: param})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func badParam(w http.ResponseWriter, param, detail string) {
	writeProblem(w, http.StatusBadRequest, probBadParameter, detail, param)
}
