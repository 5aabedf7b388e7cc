package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/duecollector/duecollector/internal/httpserve"
)

// Logins and CSRF. A login makes a session held in this process's memory (a restart logs
// everyone out): a random id in an HttpOnly, SameSite=Strict cookie, and a random CSRF token
// of its own that every action form carries and the server compares with the session's
// (the synchroniser token pattern). A POST the browser marks as sent from another site
// (Sec-Fetch-Site, else an Origin naming another host) is refused first.

// Failed logins are paced per client (httpserve.ClientAddr): loginBurst at once, then one
// every loginEvery. A guesser so paced only locks itself out; the operator logging in from
// elsewhere meanwhile is not refused. All clients together get loginAllBurst, then one every
// loginAllEvery: guessing from many addresses stays slow too.
const (
	loginBurst    = 5
	loginEvery    = 12 * time.Second
	loginAllBurst = 30
	loginAllEvery = 3 * time.Second
	// loginClients bounds the buckets kept: newcomers past it share one.
	loginClients = 10_000
)

// loginPacer holds the failed-login buckets; its owner serialises the calls (loginMu).
type loginPacer struct {
	all     *rate.Limiter
	clients map[string]*rate.Limiter
}

func newLoginPacer() *loginPacer {
	return &loginPacer{all: rate.NewLimiter(rate.Every(loginAllEvery), loginAllBurst), clients: map[string]*rate.Limiter{}}
}

// paced reports whether client, or everyone, is out of failed logins for now. A client that
// never failed has no bucket: a full one.
func (p *loginPacer) paced(client string, now time.Time) bool {
	if b := p.clients[client]; b != nil && b.TokensAt(now) < 1 {
		return true
	}
	return p.all.TokensAt(now) < 1
}

// failed charges a failed login to client and to everyone.
func (p *loginPacer) failed(client string, now time.Time) {
	p.bucket(client, now).AllowN(now, 1)
	p.all.AllowN(now, 1)
}

// bucket is client's bucket, made at its first failure. A refilled one holds nothing worth
// keeping: once the map reaches loginClients they are dropped, and past that newcomers share
// one.
func (p *loginPacer) bucket(client string, now time.Time) *rate.Limiter {
	if b := p.clients[client]; b != nil {
		return b
	}
	if len(p.clients) >= loginClients {
		for k, b := range p.clients {
			if b.TokensAt(now) >= loginBurst {
				delete(p.clients, k)
			}
		}
		if len(p.clients) >= loginClients {
			client = "overflow"
			if b := p.clients[client]; b != nil {
				return b
			}
		}
	}
	b := rate.NewLimiter(rate.Every(loginEvery), loginBurst)
	p.clients[client] = b
	return b
}

// sessionCookie names the console's session cookie.
const sessionCookie = "duecollector_console"

type session struct {
	user    string
	csrf    string
	expires time.Time
	wrote   time.Time // this session's last action, for reading its own writes
}

type sessions struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]session
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, m: map[string]session{}}
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session and returns its id.
func (s *sessions) create(user string, now time.Time) (string, session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ss := range s.m { // forget expired logins, so the map stays as small as the live ones
		if now.After(ss.expires) {
			delete(s.m, id)
		}
	}
	id, ss := randomToken(), session{user: user, csrf: randomToken(), expires: now.Add(s.ttl)}
	s.m[id] = ss
	return id, ss
}

func (s *sessions) get(id string, now time.Time) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.m[id]
	if !ok || now.After(ss.expires) {
		return session{}, false
	}
	return ss, true
}

// wroteAt records that session id's action wrote to the primary at t.
func (s *sessions) wroteAt(id string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss, ok := s.m[id]; ok {
		ss.wrote = t
		s.m[id] = ss
	}
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// actionsEnabled: credentials are configured.
func (c *Console) actionsEnabled() bool { return !c.cfg.Password.Empty() }

// sessionOf returns the request's live session.
func (c *Console) sessionOf(r *http.Request) (session, string, bool) {
	if !c.actionsEnabled() {
		return session{}, "", false
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return session{}, "", false
	}
	ss, ok := c.auth.get(ck.Value, time.Now())
	return ss, ck.Value, ok
}

// credentialsMatch compares in constant time (over digests, so lengths leak nothing either).
func (c *Console) credentialsMatch(user, password string) bool {
	hu, wu := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(c.cfg.User))
	hp, wp := sha256.Sum256([]byte(password)), sha256.Sum256([]byte(c.cfg.Password.Reveal()))
	return subtle.ConstantTimeCompare(hu[:], wu[:])&subtle.ConstantTimeCompare(hp[:], wp[:]) == 1
}

// crossOrigin judges a request by Sec-Fetch-Site, which browsers send and a page cannot set,
// else by its Origin against the Host it was sent to: a proxy that rewrites Host does not
// turn the console's own forms away.
var crossOrigin = http.NewCrossOriginProtection()

// sameOrigin refuses a POST a browser sent from another site. A request that says neither
// (curl) is judged by its CSRF token alone.
func sameOrigin(r *http.Request) bool { return crossOrigin.Check(r) == nil }

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if !c.actionsEnabled() {
		http.Error(w, "the console is read-only: no console password is configured", http.StatusForbidden)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "cross-origin login refused", http.StatusForbidden)
		return
	}
	ok, paced := c.tryLogin(httpserve.ClientAddr(r), r.PostFormValue("user"), r.PostFormValue("password"), time.Now())
	if paced {
		w.Header().Set("Retry-After", strconv.Itoa(int(loginEvery.Seconds())))
		http.Error(w, "too many failed logins; try again in a moment", http.StatusTooManyRequests)
		return
	}
	if !ok {
		c.log.Warn("console: login refused", zap.String("remote", r.RemoteAddr))
		c.render(w, http.StatusUnauthorized, "login", pageData{Title: "Log in", Message: "Wrong user or password.",
			Actions: true, Back: localPath(r.PostFormValue("back"))})
		return
	}
	id, _ := c.auth.create(c.cfg.User, time.Now())
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: overTLS(r), MaxAge: int(c.cfg.Session.Seconds())})
	c.log.Info("console: login", zap.String("user", c.cfg.User), zap.String("remote", r.RemoteAddr))
	http.Redirect(w, r, localPath(r.PostFormValue("back")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	ss, id, ok := c.sessionOf(r)
	if !ok || !sameOrigin(r) || !tokenMatch(r.PostFormValue("csrf"), ss.csrf) {
		http.Error(w, "not logged in, or a bad CSRF token", http.StatusForbidden)
		return
	}
	c.auth.drop(id)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// tryLogin compares the credentials unless client's guessing, or everyone's, is being paced
// (paced: refused unread); a success costs nothing. Check, compare and charge are one step
// under loginMu: apart, tries arriving together all passed the check before any was charged.
func (c *Console) tryLogin(client, user, password string, now time.Time) (ok, paced bool) {
	c.loginMu.Lock()
	defer c.loginMu.Unlock()
	if c.logins.paced(client, now) {
		return false, true
	}
	if c.credentialsMatch(user, password) {
		return true, false
	}
	c.logins.failed(client, now)
	return false, false
}

// overTLS tells whether the browser reached the console over https: directly, or through the
// TLS proxy the docs put in front (the login form's Origin is the page's, which a page cannot
// forge), so that the session cookie is marked Secure and never sent over plain http.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(r.Header.Get("Origin"), "https://")
}

func tokenMatch(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// localPath keeps a redirect on the console: a path of this host, or /. A backslash is refused
// anywhere: browsers read it as a slash, and http.Redirect cleans "/./\\host" into "/\\host",
// which they follow to another site.
func localPath(p string) string {
	u, err := url.Parse(p)
	if err != nil || p == "" || p[0] != '/' || (len(p) > 1 && p[1] == '/') || strings.ContainsRune(p, '\\') || u.Host != "" || u.Scheme != "" {
		return "/"
	}
	return p
}
