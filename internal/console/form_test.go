package console_test

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A POST's body is read within a few kilobytes before any handler runs: a login form (read
// before any credential is checked) of a megabyte is refused, and a multipart one is never
// parsed (its file parts would be held in memory, then spilled to disk, without end).
func TestFormsAreReadWithinAFewKilobytes(t *testing.T) {
	e := setup(t, testPassword)
	big := url.Values{"user": {testUser}, "password": {strings.Repeat("x", 1<<20)}}
	if code := post(t, http.DefaultClient, e.srv.URL+"/login", big); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 1 MB login form: %d, want 413", code)
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("user", testUser)
	_ = mw.WriteField("password", testPassword)
	_ = mw.Close()
	res, err := http.Post(e.srv.URL+"/login", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a multipart login: %d, want 401 (its fields are not read)", res.StatusCode)
	}
	// The console's own forms still work.
	if code := post(t, http.DefaultClient, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {testPassword}}); code != http.StatusSeeOther {
		t.Fatalf("a login of the console's own form: %d, want 303", code)
	}
}
