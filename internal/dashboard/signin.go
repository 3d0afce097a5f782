package dashboard

import (
	"net/http"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/agentsilo/agentsilo/internal/protocol"
)

// Sign-in with the OpenID provider: the authorization code grant with
// PKCE, the dashboard a public client of the provider (Config.OIDCClientID).
// /ui/login/oidc sends the browser to the provider's authorization
// endpoint with a fresh state and PKCE challenge, the state also in a
// cookie of this browser; the provider sends it back to
// /ui/login/oidc/callback with a code, which the dashboard exchanges,
// with the PKCE verifier, for the user's access token. The token is then
// proven as the gateway proves any (AuthenticateHTTP) and starts a session
// as a pasted one does.

// stateCookie carries a sign-in's state, so that only the browser that
// started it completes it (no login CSRF).
const stateCookie = "agentsilo_oidc"

// signInTTL bounds how long a sign-in may take at the provider; maxFlows
// how many may be pending.
const (
	signInTTL = 10 * time.Minute
	maxFlows  = 1000
)

// flow is a pending sign-in.
type flow struct {
	verifier, next string
	at             time.Time
}

// flows are the pending sign-ins by state.
type flows struct {
	mu sync.Mutex
	m  map[string]flow
}

func (f *flows) add(state string, fl flow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[string]flow)
	}
	for s, o := range f.m {
		if fl.at.Sub(o.at) > signInTTL {
			delete(f.m, s)
		}
	}
	if len(f.m) >= maxFlows {
		clear(f.m)
	}
	f.m[state] = fl
}

func (f *flows) take(state string, now time.Time) (flow, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.m[state]
	delete(f.m, state)
	return fl, ok && now.Sub(fl.at) <= signInTTL
}

// signInOn reports whether users sign in with the provider here.
func (d *Dashboard) signInOn() bool {
	if d.open() || d.cfg.OIDCClientID == "" {
		return false
	}
	_, ok := d.cfg.Auth.OIDC()
	return ok
}

// callbackURL is where the provider sends the browser back: this
// dashboard's own address, as the browser reached it.
func callbackURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/ui/login/oidc/callback"
}

// signIn starts a sign-in at the provider.
func (d *Dashboard) signIn(w http.ResponseWriter, r *http.Request) {
	if !d.signInOn() {
		http.NotFound(w, r)
		return
	}
	cfg, _, err := d.cfg.Auth.OAuth2(r.Context(), d.cfg.OIDCClientID, callbackURL(r))
	if err != nil {
		d.renderLogin(w, http.StatusServiceUnavailable, d.loginView(r, "", message(err)))
		return
	}
	state, verifier := token(), oauth2.GenerateVerifier()
	d.flows.add(state, flow{verifier: verifier, next: safeNext(r.URL.Query().Get("next")), at: d.cfg.Now()})
	// Lax, not Strict: the provider's redirect back is a navigation from
	// another site, on which a Strict cookie is not sent.
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: state, Path: "/ui/login/oidc", MaxAge: int(signInTTL / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), http.StatusFound)
}

// signedIn completes a sign-in: the code exchanged for the user's token,
// which starts a session.
func (d *Dashboard) signedIn(w http.ResponseWriter, r *http.Request) {
	if !d.signInOn() {
		http.NotFound(w, r)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: "", Path: "/ui/login/oidc", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	q := r.URL.Query()
	c, err := r.Cookie(stateCookie)
	state := q.Get("state")
	fl, ok := d.flows.take(state, d.cfg.Now())
	switch {
	case err != nil || state == "" || c.Value != state || !ok:
		d.renderLogin(w, http.StatusUnauthorized, d.loginView(r, "", "That sign-in was not started here, or took too long: sign in again."))
		return
	case q.Get("error") != "":
		d.renderLogin(w, http.StatusUnauthorized, d.loginView(r, fl.next, "The provider refused the sign-in: "+protocol.Clip(q.Get("error")+" "+q.Get("error_description"))))
		return
	}
	cfg, hctx, err := d.cfg.Auth.OAuth2(r.Context(), d.cfg.OIDCClientID, callbackURL(r))
	if err != nil {
		d.renderLogin(w, http.StatusServiceUnavailable, d.loginView(r, fl.next, message(err)))
		return
	}
	tok, err := cfg.Exchange(hctx, q.Get("code"), oauth2.VerifierOption(fl.verifier))
	if err != nil {
		d.cfg.Logger.Warn("dashboard: sign-in: the code exchange failed", "err", err)
		d.renderLogin(w, http.StatusUnauthorized, d.loginView(r, fl.next, "The provider did not give a token for that sign-in: sign in again."))
		return
	}
	probe, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, "/", nil)
	probe.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	caller, err := d.cfg.Auth.AuthenticateHTTP(probe)
	if err != nil {
		d.renderLogin(w, http.StatusUnauthorized, d.loginView(r, fl.next, "The provider's token is not valid here: "+message(err)))
		return
	}
	s := d.sessions.add(tok.AccessToken, caller)
	d.setCookie(w, r, s)
	d.cfg.Logger.Info("dashboard: signed in with the OpenID provider", "principal", caller.Principal)
	// A page that moves on, not a redirect: the session cookie is
	// SameSite=Strict, and a redirect still counts as the provider's
	// navigation, on which the browser would not send it.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Refresh", "0; url="+fl.next)
	if err := d.pages["signedin"].ExecuteTemplate(w, "signedin", fl.next); err != nil {
		d.cfg.Logger.Warn("dashboard: render signedin", "err", err)
	}
}
