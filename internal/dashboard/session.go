package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// cookieName is the session cookie's name.
const cookieName = "agentsilo_ui"

// maxKeyLen bounds an API key typed into the login form.
const maxKeyLen = 4096

// A session is one login: the principal, the key its calls carry, and the
// token its actions must send back. A request over TLS that shows a client
// certificate is a session of its own (cert), made for the request: the
// certificate, not a cookie, says who it is.
type session struct {
	id     string
	key    string // the API key or the provider's token; "" where nobody logs in
	cert   *tls.ConnectionState
	caller *acl.Caller
	csrf   string
	used   time.Time
}

// ctx is ctx carrying the session's credentials to the gateway. A
// certificate's private key stays in the browser, so for a certificate's
// principal the silo vouches instead, which its gateway takes only from
// the in-process connection the dashboard holds (auth.Vouch).
func (s *session) ctx(ctx context.Context) context.Context {
	switch {
	case s.cert != nil:
		return auth.Vouch(ctx, s.caller)
	case s.key != "":
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.key)
	}
	return metadata.AppendToOutgoingContext(ctx, protocol.PrincipalHeader, s.caller.Principal)
}

// sessions are the logged-in sessions, at most max, each dropped after
// ttl unused.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	max int
	ttl time.Duration
	now func() time.Time
}

func newSessions(max int, ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, max: max, ttl: ttl, now: now}
}

// add keeps a new session for caller, dropping expired ones and, at the
// bound, the least recently used.
func (ss *sessions) add(key string, caller *acl.Caller) *session {
	s := &session{id: token(), key: key, caller: caller, csrf: token(), used: ss.now()}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	for id, o := range ss.m {
		if now.Sub(o.used) > ss.ttl {
			delete(ss.m, id)
		}
	}
	for len(ss.m) >= ss.max {
		var oldest *session
		for _, o := range ss.m {
			if oldest == nil || o.used.Before(oldest.used) {
				oldest = o
			}
		}
		delete(ss.m, oldest.id)
	}
	ss.m[s.id] = s
	return s
}

func (ss *sessions) get(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[id]
	if s == nil {
		return nil
	}
	now := ss.now()
	if now.Sub(s.used) > ss.ttl || (!s.caller.Expires.IsZero() && now.After(s.caller.Expires)) {
		// Unused too long, or its token expired: log in again.
		delete(ss.m, id)
		return nil
	}
	s.used = now
	return s
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

// token is 32 random bytes, base64url.
func token() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// anonymous is the session of every visitor where nobody logs in.
var anonymous = &session{caller: &acl.Caller{Principal: gateway.DefaultPrincipal}}

// current returns the request's session, or nil: its client
// certificate's, or its cookie's. A certificate that the client CA signed
// but that names no usable principal is an error.
func (d *Dashboard) current(r *http.Request) (*session, error) {
	if s, err := d.certSession(r); s != nil || err != nil {
		return s, err
	}
	if d.open() {
		// One session for everybody; its CSRF token still comes from a
		// cookie, so another site cannot forge an action.
		if c, err := r.Cookie(cookieName); err == nil {
			if s := d.sessions.get(c.Value); s != nil {
				return s, nil
			}
		}
		return nil, nil
	}
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil, nil
	}
	return d.sessions.get(c.Value), nil
}

// certSession is the session of a request whose TLS connection showed a
// client certificate verified against the client CA: its principal taken
// from the certificate exactly as the gateway takes it, and a CSRF token
// bound to the certificate. Nil for any other request; the plain HTTP port
// never has one.
func (d *Dashboard) certSession(r *http.Request) (*session, error) {
	if d.open() || r.TLS == nil {
		return nil, nil
	}
	c, err := d.cfg.Auth.CertificateCaller(r.TLS)
	if c == nil || err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, d.certKey)
	mac.Write(r.TLS.PeerCertificates[0].Raw)
	return &session{cert: r.TLS, caller: c, csrf: base64.RawURLEncoding.EncodeToString(mac.Sum(nil))}, nil
}

// authed serves h to a logged-in session; others go to the login page
// (htmx's requests get 401, and the page reloads into the login).
func (d *Dashboard) authed(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := d.current(r)
		if err != nil {
			d.refuse(w, r, err)
			return
		}
		if s == nil && d.open() {
			s = d.sessions.add("", anonymous.caller)
			d.setCookie(w, r, s)
		}
		if s == nil {
			if r.Header.Get("HX-Request") == "true" || r.Method != http.MethodGet {
				w.Header().Set("HX-Redirect", "/ui/login")
				http.Error(w, "log in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		h(w, r, s)
	}
}

// post serves an action: a logged-in session, from the dashboard's own
// origin, carrying the session's CSRF token.
func (d *Dashboard) post(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return d.authed(func(w http.ResponseWriter, r *http.Request, s *session) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !sameOrigin(r) {
			http.Error(w, "refused: the request comes from another origin", http.StatusForbidden)
			return
		}
		tok := r.Header.Get("X-CSRF-Token")
		if tok == "" {
			tok = r.PostFormValue("csrf")
		}
		if subtle.ConstantTimeCompare([]byte(tok), []byte(s.csrf)) != 1 {
			http.Error(w, "refused: missing or wrong CSRF token (reload the page)", http.StatusForbidden)
			return
		}
		h(w, r, s)
	})
}

// sameOrigin reports whether r's Origin (or, without one, Referer) is the
// dashboard's own host; a request naming neither is from no page and
// passes (a script with the cookie would need the CSRF token anyway).
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		o = r.Header.Get("Referer")
	}
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func (d *Dashboard) setCookie(w http.ResponseWriter, r *http.Request, s *session) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: s.id, Path: "/ui", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
}

// refuse answers a request whose client certificate names no usable
// principal.
func (d *Dashboard) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if r.Header.Get("HX-Request") == "true" || r.Method != http.MethodGet {
		http.Error(w, message(err), http.StatusUnauthorized)
		return
	}
	d.renderLogin(w, http.StatusUnauthorized, d.loginView(r, "", message(err)))
}

type loginView struct {
	Silo  string
	Next  string
	Error string
	// Keys: API keys log in here. CertURL: where client certificates log
	// in, if not here (the plain HTTP port). Cert: client certificates
	// log in here, and the browser showed none.
	Keys    bool
	CertURL string
	Cert    bool
	// Issuer: tokens of this OpenID provider log in here. SignIn: users
	// sign in with it (the authorization code grant).
	Issuer string
	SignIn bool
}

func (d *Dashboard) loginView(r *http.Request, next, errMsg string) loginView {
	v := loginView{Silo: d.cfg.Silo, Next: next, Error: errMsg}
	if d.open() {
		return v
	}
	v.Keys = d.cfg.Auth.APIKeys()
	v.Issuer, _ = d.cfg.Auth.OIDC()
	v.SignIn = d.signInOn()
	if d.cfg.Auth.MutualTLS() {
		if r.TLS != nil {
			v.Cert = true
		} else if d.cfg.CertificateAddr != nil {
			v.CertURL = certURL(d.cfg.CertificateAddr(), r.Host)
		}
	}
	return v
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	s, err := d.current(r)
	if err != nil {
		d.refuse(w, r, err)
		return
	}
	if d.open() || (s != nil && s.cert != nil) {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	d.renderLogin(w, http.StatusOK, d.loginView(r, safeNext(r.URL.Query().Get("next")), ""))
}

func (d *Dashboard) renderLogin(w http.ResponseWriter, code int, v loginView) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	if err := d.pages["login"].ExecuteTemplate(w, "login", v); err != nil {
		d.cfg.Logger.Warn("dashboard: render login", "err", err)
	}
}

// login takes an API key or a token of the OpenID provider, proves it as
// the gateway would, and starts a session, whose calls carry it as
// "authorization: Bearer". A token's session ends for the gateway when the
// token expires: its calls are then Unauthenticated, and the user logs in
// again with a fresh one.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if s, _ := d.certSession(r); d.open() || s != nil {
		// A client certificate is already who the browser is.
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if !sameOrigin(r) {
		http.Error(w, "refused: the request comes from another origin", http.StatusForbidden)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	key := r.PostFormValue("key")
	_, tokens := d.cfg.Auth.OIDC()
	if !d.cfg.Auth.APIKeys() && !tokens {
		d.renderLogin(w, http.StatusUnauthorized, d.loginView(r, next, "This cluster takes no API keys: log in with a client certificate."))
		return
	}
	if key == "" || len(key) > maxKeyLen {
		d.renderLogin(w, http.StatusUnauthorized, d.loginView(r, next, "Enter an API key or access token of this cluster."))
		return
	}
	// A plain request with the key alone: whatever certificate the
	// browser showed, the key decides who logs in.
	probe, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, "/", nil)
	probe.Header.Set("Authorization", "Bearer "+key)
	caller, err := d.cfg.Auth.AuthenticateHTTP(probe)
	if err != nil {
		d.renderLogin(w, http.StatusUnauthorized, d.loginView(r, next, "That key is not valid here."))
		return
	}
	s := d.sessions.add(key, caller)
	d.setCookie(w, r, s)
	d.cfg.Logger.Info("dashboard: login", "principal", caller.Principal)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, s *session) {
	d.sessions.remove(s.id)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("HX-Redirect", "/ui/login")
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// safeNext keeps a redirect target within the dashboard.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || u.Scheme != "" || u.Host != "" || len(next) > 1024 || len(u.Path) < 4 || u.Path[:4] != "/ui/" {
		return "/ui/"
	}
	return u.RequestURI()
}

// certURL is the dashboard's address on its TLS listener addr, as a
// browser that reached it at host (the plain port) can open it.
func certURL(addr, host string) string {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		} else {
			h = host
		}
	}
	return "https://" + net.JoinHostPort(h, port) + "/ui/"
}
