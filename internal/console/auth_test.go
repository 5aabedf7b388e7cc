package console

import (
	"fmt"
	"testing"
	"time"
)

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

// Guessing from many addresses is held to loginAllBurst failures in all, and the buckets kept
// stay bounded however many addresses guess.
func TestGuessesFromEveryAddressShareACeiling(t *testing.T) {
	c := &Console{cfg: Config{User: "op", Password: "pw"}, logins: newLoginPacer()}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	client := 0
	for failed := 0; failed < loginAllBurst; {
		client++
		for range loginBurst {
			if ok, paced := c.tryLogin(fmt.Sprintf("10.0.%d.%d", client/256, client%256), "op", "guess", now); ok || paced {
				t.Fatalf("guess %d from a fresh address: ok %t, paced %t; want refused unpaced", failed+1, ok, paced)
			}
			failed++
		}
	}
	if ok, paced := c.tryLogin("192.0.2.1", "op", "pw", now); ok || !paced {
		t.Fatalf("past the ceiling, a new address with the right password: ok %t, paced %t; want paced", ok, paced)
	}
	if ok, paced := c.tryLogin("192.0.2.1", "op", "pw", now.Add(loginAllEvery)); !ok || paced {
		t.Fatalf("one loginAllEvery later: ok %t, paced %t; want logged in", ok, paced)
	}

	p := newLoginPacer()
	for i := range loginClients + 100 {
		p.bucket(fmt.Sprintf("client-%d", i), now).AllowN(now, 1)
	}
	if len(p.clients) > loginClients+1 {
		t.Fatalf("%d buckets kept, want at most %d and the overflow's", len(p.clients), loginClients)
	}
	later := now.Add(loginBurst * loginEvery) // every bucket has refilled: the next newcomer sweeps them
	p.bucket("newcomer", later)
	if len(p.clients) != 1 {
		t.Fatalf("%d buckets kept once all had refilled, want the newcomer's alone", len(p.clients))
	}
}

// A login lasts console.session and no longer; logins past it are forgotten when the next one
// is made, so the map holds only live ones.
func TestASessionEndsWithItsTTL(t *testing.T) {
	s := newSessions(time.Hour)
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	id, _ := s.create("op", t0)
	if _, ok := s.get(id, t0.Add(59*time.Minute)); !ok {
		t.Fatal("a session within its TTL was not found")
	}
	if _, ok := s.get(id, t0.Add(61*time.Minute)); ok {
		t.Fatal("a session past its TTL still works")
	}
	s.create("op", t0.Add(61*time.Minute))
	if n := len(s.m); n != 1 {
		t.Fatalf("%d sessions kept after an expired one and a new login, want 1", n)
	}
}
