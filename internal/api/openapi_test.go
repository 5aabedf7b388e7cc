package api_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/duecollector/duecollector/internal/tiers"
)

// spec is openapi.json, read as a client reads it, with its schemas compiled by a JSON Schema
// 2020-12 validator (OpenAPI 3.1's dialect).
type spec struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	schemas  map[string]*jsonschema.Schema
	paths    []specPath
}

type specPath struct {
	template string
	re       *regexp.Regexp
	op       map[string]any
}

var (
	specOnce sync.Once
	theSpec  *spec
	specErr  error
)

func loadSpec(t testing.TB) *spec {
	t.Helper()
	specOnce.Do(func() { theSpec, specErr = readSpec("openapi.json") })
	if specErr != nil {
		t.Fatalf("openapi.json: %v", specErr)
	}
	return theSpec
}

func readSpec(file string) (*spec, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	s := &spec{doc: doc.(map[string]any), compiler: jsonschema.NewCompiler(), schemas: map[string]*jsonschema.Schema{}}
	if v, _ := s.doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		return nil, fmt.Errorf("openapi %q: want 3.1.x", v)
	}
	s.compiler.AssertFormat()
	if err := s.compiler.AddResource("openapi.json", doc); err != nil {
		return nil, err
	}
	for tmpl, item := range s.doc["paths"].(map[string]any) {
		re := regexp.MustCompile(`^` + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(tmpl), `[^/]+`) + `$`)
		op, ok := item.(map[string]any)["get"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("path %s: no get operation", tmpl)
		}
		s.paths = append(s.paths, specPath{template: tmpl, re: re, op: op})
	}
	// Every reference must resolve: compile each one once up front.
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				refs = append(refs, r)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(s.doc)
	for _, r := range refs {
		if _, err := s.resolve(r); err != nil {
			return nil, fmt.Errorf("$ref %s: %w", r, err)
		}
	}
	return s, nil
}

// resolve follows a local reference ("#/components/…").
func (s *spec) resolve(ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("not a local reference")
	}
	var cur any = s.doc
	for _, part := range strings.Split(ref[2:], "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not an object", part)
		}
		if cur, ok = m[strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")]; !ok {
			return nil, fmt.Errorf("%s: missing", part)
		}
	}
	return cur, nil
}

func (s *spec) deref(v any) map[string]any {
	m, _ := v.(map[string]any)
	for m != nil {
		r, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		next, err := s.resolve(r)
		if err != nil {
			return nil
		}
		m, _ = next.(map[string]any)
	}
	return m
}

// schema compiles the schema at a JSON pointer into openapi.json.
func (s *spec) schema(pointer string) (*jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc, ok := s.schemas[pointer]; ok {
		return sc, nil
	}
	sc, err := s.compiler.Compile("openapi.json" + pointer)
	if err != nil {
		return nil, err
	}
	s.schemas[pointer] = sc
	return sc, nil
}

// check validates one response against the document: the path and status are documented, the
// content type is one the response lists, the body matches its schema, every documented
// header that is sent (and every required one) matches its schema, and every header the
// document defines that is sent is documented for that answer. It returns what is wrong.
func (s *spec) check(method, path string, resp *http.Response, body []byte) []string {
	var errs []string
	fail := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
	var p *specPath
	for i := range s.paths {
		if s.paths[i].re.MatchString(path) {
			p = &s.paths[i]
		}
	}
	if p == nil {
		// Unknown endpoints answer a problem; there is no operation to hold it to.
		if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			fail("%s %s: undocumented path answered %d %s", method, path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return errs
	}
	if method == http.MethodOptions && resp.StatusCode == http.StatusNoContent {
		return errs // a CORS preflight: no operation describes it
	}
	if method != http.MethodGet && method != http.MethodHead && resp.StatusCode != http.StatusMethodNotAllowed {
		fail("%s %s: answered %d, want 405", method, path, resp.StatusCode)
		return errs
	}
	code := strconv.Itoa(resp.StatusCode)
	responses := p.op["responses"].(map[string]any)
	rv, ok := responses[code]
	if !ok {
		fail("%s %s: status %s is not documented for %s", method, path, code, p.template)
		return errs
	}
	ptr := "/paths/" + strings.ReplaceAll(p.template, "/", "~1") + "/get/responses/" + code
	r := s.deref(rv)
	if ref, ok := rv.(map[string]any)["$ref"].(string); ok {
		ptr = strings.TrimPrefix(ref, "#")
	}
	headers, _ := r["headers"].(map[string]any)
	for name, hv := range headers {
		h := s.deref(hv)
		val := resp.Header.Get(name)
		if val == "" {
			if req, _ := h["required"].(bool); req {
				fail("%s %s %s: required header %s missing", method, path, code, name)
			}
			continue
		}
		hptr := ptr + "/headers/" + name + "/schema"
		if ref, ok := hv.(map[string]any)["$ref"].(string); ok {
			hptr = strings.TrimPrefix(ref, "#") + "/schema"
		}
		sc, err := s.schema("#" + hptr)
		if err != nil {
			fail("header %s schema: %v", name, err)
			continue
		}
		if err := sc.Validate(val); err != nil {
			fail("%s %s %s: header %s %q: %v", method, path, code, name, val, err)
		}
	}
	// The API's own headers (those the document defines) are documented wherever they are sent.
	for name := range s.doc["components"].(map[string]any)["headers"].(map[string]any) {
		if _, ok := headers[name]; !ok && resp.Header.Get(name) != "" {
			fail("%s %s %s: header %s is sent but not documented for this answer", method, path, code, name)
		}
	}
	content, _ := r["content"].(map[string]any)
	if len(content) == 0 {
		if len(body) > 0 {
			fail("%s %s %s: a body where none is documented", method, path, code)
		}
		return errs
	}
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	if _, ok := content[ct]; !ok {
		fail("%s %s %s: content type %q; documented %v", method, path, code, ct, keys(content))
		return errs
	}
	if method == http.MethodHead {
		return errs
	}
	sptr := ptr + "/content/" + strings.ReplaceAll(ct, "/", "~1") + "/schema"
	sc, err := s.schema("#" + sptr)
	if err != nil {
		fail("schema %s: %v", sptr, err)
		return errs
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		fail("%s %s %s: body is not JSON: %v", method, path, code, err)
		return errs
	}
	if err := sc.Validate(inst); err != nil {
		fail("%s %s %s: body does not match %s: %v", method, path, code, sptr, err)
	}
	return errs
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checking is a transport that holds every response a test receives to the document.
type checking struct {
	t    testing.TB
	spec *spec
	base http.RoundTripper
}

func (c checking) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	plain := raw
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			c.t.Errorf("%s %s: Content-Encoding gzip, but: %v", req.Method, req.URL.Path, err)
			return resp, nil
		}
		if plain, err = io.ReadAll(zr); err != nil {
			c.t.Errorf("%s %s: bad gzip: %v", req.Method, req.URL.Path, err)
		}
	}
	for _, e := range c.spec.check(req.Method, req.URL.Path, resp, plain) {
		c.t.Errorf("openapi.json: %s", e)
	}
	return resp, nil
}

// The document is OpenAPI 3.1, every reference in it resolves, and each schema compiles.
func TestOpenAPIDocumentIsWellFormed(t *testing.T) {
	s := loadSpec(t)
	var ptrs []string
	for name := range s.doc["components"].(map[string]any)["schemas"].(map[string]any) {
		ptrs = append(ptrs, "#/components/schemas/"+name)
	}
	for _, p := range ptrs {
		if _, err := s.schema(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	var v struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	raw, _ := os.ReadFile("openapi.json")
	if err := json.Unmarshal(raw, &v); err != nil || len(v.Paths) != 4 {
		t.Fatalf("paths: %v (%d)", err, len(v.Paths))
	}
}

// The document's Tier is internal/tiers' list: a tier added there and not here would fail a
// client that validates answers against the document.
func TestOpenAPITiersAreTheCollectorsTiers(t *testing.T) {
	s := loadSpec(t)
	enum := s.doc["components"].(map[string]any)["schemas"].(map[string]any)["Tier"].(map[string]any)["enum"]
	var want []any
	for _, tier := range tiers.All() {
		want = append(want, string(tier))
	}
	if got, _ := enum.([]any); !slices.Equal(got, want) {
		t.Fatalf("openapi.json Tier enum %v, want %v", enum, want)
	}
}
