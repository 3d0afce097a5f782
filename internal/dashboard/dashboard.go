package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/mcp"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

//go:embed assets/templates/*.html assets/dash.css assets/dash.js assets/vendor/*.js assets/vendor/*.css
var assets embed.FS

// Config says what the dashboard reads and how it proves its users.
type Config struct {
	// Silo names the silo serving the dashboard.
	Silo string
	// Conn is a connection to the silo's own gateway: every read and
	// action goes through it as the logged-in principal.
	Conn grpc.ClientConnInterface
	// Auth proves who logs in (an API key), as the gateway does. Nil or
	// not Enabled: nobody logs in, and every visitor acts as
	// auth.DefaultPrincipal, which the silo allows only where its
	// gateway runs without authentication (loopback, or --insecure).
	Auth *auth.Authenticator
	// CertificateAddr returns the address (host:port) where users log in
	// with a client certificate, which the plain HTTP port cannot take: the
	// silo's --dashboard-addr, served over TLS. The login page of the plain
	// port links there (an unspecified host: the host the browser used).
	// Nil, or "": nowhere.
	CertificateAddr func() string
	// ACL, if set, hides the buttons of actions the principal may not
	// take (the gateway refuses them anyway).
	ACL *acl.Authority
	// Metrics is the registry the charts sample (this silo's; the other
	// silos' come through etcd).
	Metrics prometheus.Gatherer
	// Etcd and Prefix, if set, give the etcd health on the cluster page,
	// the A2A tasks, and the charts of every silo (each silo publishes its
	// samples there while somebody watches; see load.go).
	Etcd   *clientv3.Client
	Prefix string
	// A2A is the silo's A2A handler, which cancels tasks; nil: A2A is off.
	A2A http.Handler
	// A2ACertificates: A2A takes the client certificates the dashboard
	// takes (the same client CA), so a certificate's cancel is handed to A2A
	// with the browser's TLS connection, as A2A's own clients' are. False:
	// a certificate's principal cannot cancel A2A tasks here.
	A2ACertificates bool
	// MCP is the silo's MCP server and MCPAddr its address, for the MCP
	// page; nil: the silo serves no MCP.
	MCP     *mcp.Server
	MCPAddr string
	// SampleEvery is how often the charts sample Metrics. Default: 5 s.
	SampleEvery time.Duration
	// MaxSessions bounds the logged-in sessions kept; the oldest goes
	// first. Default: 1000.
	MaxSessions int
	// OIDCClientID, with an OpenID provider in Auth, is the dashboard's
	// client at the provider: users sign in there (the authorization
	// code grant with PKCE, a public client whose redirect URI is
	// <the dashboard's URL>/ui/login/oidc/callback). Empty: users paste
	// a token instead.
	OIDCClientID string
	// SessionTTL is how long a session lives unused. Default: 12 h.
	SessionTTL time.Duration
	// Logger receives the dashboard's logs. Default: slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// Dashboard serves the pages. Its Handler is safe for concurrent use.
type Dashboard struct {
	cfg      Config
	gw       agentsilov1.GatewayClient
	topics   agentsilov1.TopicsClient
	admin    agentsilov1.AclAdminClient
	dir      agentsilov1.DirectoryClient
	pages    map[string]*template.Template
	static   http.Handler
	sessions *sessions
	certKey  []byte // keys the CSRF tokens of certificates (session.go)
	flows    flows  // pending sign-ins with the OpenID provider (signin.go)
	series   *series
	load     loadState

	cancel context.CancelFunc // ends the sampler and the watch
	done   sync.WaitGroup
}

// New returns a dashboard for cfg; Close stops its sampler.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Conn == nil {
		return nil, errs.New(codes.InvalidArgument, "dashboard: no gateway connection")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 5 * time.Second
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 1000
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	d := &Dashboard{
		cfg:      cfg,
		gw:       agentsilov1.NewGatewayClient(cfg.Conn),
		topics:   agentsilov1.NewTopicsClient(cfg.Conn),
		admin:    agentsilov1.NewAclAdminClient(cfg.Conn),
		dir:      agentsilov1.NewDirectoryClient(cfg.Conn),
		pages:    pages,
		static:   http.StripPrefix("/ui/static/", http.FileServerFS(sub)),
		sessions: newSessions(cfg.MaxSessions, cfg.SessionTTL, cfg.Now),
		certKey:  []byte(token()),
		series:   newSeries(120),
		load:     loadState{kick: make(chan struct{}, 1)},
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	if cfg.Metrics != nil {
		d.done.Add(1)
		go d.sample(ctx)
		if cfg.Etcd != nil {
			d.done.Add(1)
			go d.watch(ctx)
		}
	}
	return d, nil
}

// Close stops the sampler and the watch. The handler keeps answering.
func (d *Dashboard) Close() {
	d.cancel()
	d.done.Wait()
}

// open reports whether visitors act without logging in.
func (d *Dashboard) open() bool { return d.cfg.Auth == nil || !d.cfg.Auth.Enabled() }

// Handler serves the dashboard under /ui/ (and /ui, redirected).
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	mux.Handle("GET /ui/static/", d.static)
	mux.HandleFunc("GET /ui/login", d.loginPage)
	mux.HandleFunc("POST /ui/login", d.login)
	mux.HandleFunc("GET /ui/login/oidc", d.signIn)
	mux.HandleFunc("GET /ui/login/oidc/callback", d.signedIn)
	mux.HandleFunc("POST /ui/logout", d.post(d.logout))
	mux.HandleFunc("GET /ui/{$}", d.page("cluster", d.clusterData))
	mux.HandleFunc("GET /ui/series.json", d.authed(d.seriesJSON))
	mux.HandleFunc("GET /ui/agents", d.page("agents", d.agentsData))
	mux.HandleFunc("GET /ui/agent", d.page("agent", d.agentData))
	mux.HandleFunc("GET /ui/models", d.page("models", d.modelsData))
	mux.HandleFunc("GET /ui/model", d.page("model", d.modelData))
	mux.HandleFunc("GET /ui/approvals", d.page("approvals", d.approvalsData))
	mux.HandleFunc("POST /ui/approvals/decide", d.post(d.decideApproval))
	mux.HandleFunc("GET /ui/audit", d.page("audit", d.auditData))
	mux.HandleFunc("POST /ui/audit/verify", d.post(d.verifyAudit))
	mux.HandleFunc("GET /ui/reminders", d.page("reminders", d.remindersData))
	mux.HandleFunc("GET /ui/topics", d.page("topics", d.topicsData))
	mux.HandleFunc("GET /ui/deadletters", d.page("deadletters", d.deadLettersData))
	mux.HandleFunc("GET /ui/a2a", d.page("a2a", d.tasksData))
	mux.HandleFunc("GET /ui/acl", d.page("acl", d.aclData))
	mux.HandleFunc("GET /ui/directory", d.page("directory", d.directoryData))
	mux.HandleFunc("GET /ui/mcp", d.page("mcp", d.mcpData))
	mux.HandleFunc("POST /ui/agent/deactivate", d.post(d.deactivate))
	mux.HandleFunc("POST /ui/reminder/remove", d.post(d.removeReminder))
	mux.HandleFunc("POST /ui/deadletters/replay", d.post(d.replay))
	mux.HandleFunc("POST /ui/deadletters/drop", d.post(d.drop))
	mux.HandleFunc("POST /ui/a2a/cancel", d.post(d.cancelTask))
	return secureHeaders(mux)
}

// secureHeaders sets the headers every answer carries: no script but the
// dashboard's own, no framing, no sniffing, no caching of pages.
func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin") // Chromium sends "Origin: null" on a form POST under no-referrer
		if !strings.HasPrefix(r.URL.Path, "/ui/static/") {
			hd.Set("Cache-Control", "no-store")
		}
		h.ServeHTTP(w, r)
	})
}

// view is what every page's template gets.
type view struct {
	Page      string
	Title     string
	Silo      string
	Principal string
	CSRF      string
	Open      bool // nobody logs in
	Cert      bool // a client certificate logged in: no logging out
	Error     string
	Self      string // the page's URL, which its live part polls
	Audit     bool   // the menu shows the audit page
	Data      any
}

// page serves a page: its data from load, rendered whole, or only its
// live part for htmx's polling (HX-Request).
func (d *Dashboard) page(name string, load func(ctx context.Context, s *session, r *http.Request) (any, error)) http.HandlerFunc {
	return d.authed(func(w http.ResponseWriter, r *http.Request, s *session) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		data, err := load(s.ctx(ctx), s, r)
		v := view{Self: r.URL.RequestURI(), Page: name, Title: titles[name], Silo: d.cfg.Silo, Principal: s.caller.Principal, CSRF: s.csrf, Open: d.open(), Cert: s.cert != nil, Audit: d.mayAudit(s), Data: data}
		if err != nil {
			v.Error = message(err)
		}
		d.render(w, r, name, v)
	})
}

var titles = map[string]string{
	"cluster": "Cluster", "agents": "Agents", "agent": "Agent", "reminders": "Reminders",
	"topics": "Topics", "deadletters": "Dead letters", "a2a": "A2A tasks", "acl": "ACL",
	"directory": "Directory", "mcp": "MCP", "models": "Models", "model": "Model agent", "approvals": "Approvals",
	"audit": "Audit",
}

// render executes page name's template: "live" alone for htmx's polls.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, name string, v view) {
	t := d.pages[name]
	which := "layout"
	if r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-Target") == "live" {
		which = "live"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := t.ExecuteTemplate(w, which, v); err != nil {
		d.cfg.Logger.Warn("dashboard: render", "page", name, "err", err)
	}
}

// message is what a page shows of an error: the gateway's message and code.
func message(err error) string {
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "the cluster did not answer in time"
	}
	return err.Error()
}

// nav is the menu: page, path, label.
var nav = [][3]string{
	{"cluster", "/ui/", "Cluster"}, {"agents", "/ui/agents", "Agents"}, {"models", "/ui/models", "Models"}, {"approvals", "/ui/approvals", "Approvals"}, {"reminders", "/ui/reminders", "Reminders"},
	{"topics", "/ui/topics", "Topics"}, {"a2a", "/ui/a2a", "A2A tasks"}, {"directory", "/ui/directory", "Directory"},
	{"mcp", "/ui/mcp", "MCP"}, {"acl", "/ui/acl", "ACL"}, {"audit", "/ui/audit", "Audit"},
}

// remindersTable is an agent's reminders with their remove buttons.
type remindersTable struct {
	Agent string
	List  []*agentsilov1.ReminderInfo
	May   bool
	CSRF  string
}

// parsePages parses each page with the layout.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ago":      ago,
		"join":     strings.Join,
		"since":    since,
		"inc":      func(i int) int { return i + 1 },
		"tokens":   tokens,
		"nav":      func() [][3]string { return nav },
		"dirKinds": func() []string { return []string{"", "type", "a2a", "mcp"} },
		"perms":    func() []string { return []string{"Message", "Read", "Configure", "Admin"} },
		"taskStates": func() []string {
			return []string{"", "submitted", "working", "input_required", "auth_required", "completed", "canceled", "failed", "rejected"}
		},
		"activeTask": func(s string) bool {
			return s == "submitted" || s == "working" || s == "input_required" || s == "auth_required"
		},
		"reminders": func(agent string, list []*agentsilov1.ReminderInfo, may bool, csrf string) remindersTable {
			return remindersTable{agent, list, may, csrf}
		},
		"rems": func(rows []reminderRow) []*agentsilov1.ReminderInfo {
			out := make([]*agentsilov1.ReminderInfo, len(rows))
			for i, r := range rows {
				out[i] = r.R
			}
			return out
		},
	}
	out := map[string]*template.Template{}
	for name := range titles {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: templates: %w", err)
		}
		out[name] = t
	}
	t, err := template.New("login").Funcs(funcs).ParseFS(assets, "assets/templates/login.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	out["login"] = t
	out["signedin"] = t // login.html defines it too
	return out, nil
}

// ago writes how long before now t was, roughly.
func ago(t time.Time) string {
	if t.IsZero() || t.Unix() == 0 {
		return "-"
	}
	if d := time.Until(t); d > 0 {
		return "in " + since(d)
	}
	return since(time.Since(t)) + " ago"
}

// since writes a duration roughly: 3s, 4m, 2h, 5d.
func since(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
