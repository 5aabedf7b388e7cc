package console

import "testing"

// An action or a login returns only to a path of the console itself, never to another site.
func TestLocalPathKeepsRedirectsOnTheConsole(t *testing.T) {
	for in, want := range map[string]string{
		"/items/abc?x=1":          "/items/abc?x=1",
		"/":                       "/",
		"":                        "/",
		"//evil.example/":         "/",
		"/\\evil.example":         "/",
		"/./\\evil.example/login": "/",
		"/items/a\\b":             "/",
		"https://evil.example/":   "/",
		"javascript:alert(1)":     "/",
		"items":                   "/",
		"/login?back=//evil.org":  "/login?back=//evil.org",
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// Only the configured user and password match; an empty password never does.
func TestCredentialsMatchOnlyTheConfiguredPair(t *testing.T) {
	c := &Console{cfg: Config{User: "op", Password: "pw"}}
	for _, tc := range []struct {
		user, pw string
		ok       bool
	}{{"op", "pw", true}, {"op", "pw ", false}, {"op", "", false}, {"", "pw", false}, {"OP", "pw", false}} {
		if got := c.credentialsMatch(tc.user, tc.pw); got != tc.ok {
			t.Errorf("credentialsMatch(%q, %q) = %t, want %t", tc.user, tc.pw, got, tc.ok)
		}
	}
}
