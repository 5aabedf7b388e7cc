package console

import (
	"net"
	"net/http"
	"strings"

	"github.com/duecollector/duecollector/internal/provider"
)

// loopbackHosts refuses, while no console password is set, a request that reached this
// process over loopback naming a host other than localhost or a loopback address. Listening
// on loopback (or reached through it) keeps other machines out, but not a web page in a
// browser on this machine: a site whose name its owner points at 127.0.0.1 after the page
// loaded (DNS rebinding) has the browser send its requests here as same-origin ones, Host
// naming that site, and read the answers. Browsers always send the name they resolved, so
// a loopback name tells a local client from such a page. A console with a password is meant
// to be reached by others, through a reverse proxy that passes its public name as Host (the
// login's Origin check needs it); it is served whatever the Host.
func (c *Console) loopbackHosts(h http.Handler) http.Handler {
	if c.actionsEnabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if overLoopback(r) && !loopbackHost(r.Host) {
			http.Error(w, "this console has no password and was reached over loopback, so it answers only requests addressed to localhost or a loopback address, not "+
				provider.Clean(r.Host, 100)+" (behind a reverse proxy, set a console password: see docs/console.md)", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// overLoopback says whether the request's connection arrived on a loopback address.
func overLoopback(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

func loopbackHost(hostPort string) bool {
	host := hostPort
	if h, _, err := net.SplitHostPort(hostPort); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" { // HTTP/1.0 without Host: not a browser
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}
