package console_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A console without a password, reached over loopback, answers only requests addressed to a
// loopback name: a page whose site name was pointed at 127.0.0.1 (DNS rebinding) gets 421 and
// nothing of the console. A console with a password is meant for a reverse proxy passing its
// public name, and answers whatever the Host.
func TestAConsoleWithoutPasswordAnswersOnlyLoopbackNames(t *testing.T) {
	for _, c := range []struct {
		password string
		want     map[string]int
	}{
		{"", map[string]int{"127.0.0.1": 200, "localhost": 200, "LOCALHOST.": 200, "app.localhost": 200, "[::1]": 200,
			"evil.example": http.StatusMisdirectedRequest, "localhost.evil.example": http.StatusMisdirectedRequest, "10.0.0.5": http.StatusMisdirectedRequest}},
		{testPassword, map[string]int{"127.0.0.1": 200, "console.example.com": 200}},
	} {
		e := setup(t, c.password)
		u, _ := url.Parse(e.srv.URL)
		for host, want := range c.want {
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/items", nil)
			req.Host = host + ":" + u.Port()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want || want != 200 && strings.Contains(string(b), "Golden Needle") {
				t.Errorf("password %q, Host %s: %d, want %d", c.password, host, resp.StatusCode, want)
			}
		}
	}
}
