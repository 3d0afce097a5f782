package dashboard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/a2a/a2atest"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/browsertest"
	"github.com/agentsilo/agentsilo/internal/certs/certstest"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The metadata with which the silo's dashboard vouches for a principal to
// its own gateway; outside callers try it below.
const vouchHeader = "x-agentsilo-vouched-principal"

// TestDashboardCertificate: a silo whose gateway takes client
// certificates only serves the dashboard over TLS on --dashboard-addr.
// Carol, with a certificate of the client CA, sees the pages in the
// browser, deactivates her own agent and is refused dave's; a certificate
// of another CA and no certificate are refused; the plain HTTP port takes
// no session; and nobody outside the silo can use the vouching the
// dashboard does for carol: not on the gateway, not on either HTTP port.
//
// The browser is headless Chromium, which cannot be handed a client
// certificate without a system-wide policy and an NSS database: it talks
// to a reverse proxy in the test whose Go client shows carol's
// certificate to the dashboard's TLS listener (the protocol part, which
// the Go clients below check directly too).
func TestDashboardCertificate(t *testing.T) {
	chromium := testutil.NeedCommand(t, "chromium", "Debian's chromium")
	dir := t.TempDir()
	ca, err := certstest.NewCA(dir, "client CA")
	must(t, err)
	other, err := certstest.NewCA(t.TempDir(), "other CA")
	must(t, err)
	srvCert, srvKey, err := ca.Issue("silo", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	must(t, err)
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(ca.CertFile)
	must(t, err)
	roots.AppendCertsFromPEM(pem)
	certOf := func(ca *certstest.CA, cn string) tls.Certificate {
		c, k, err := ca.Issue(cn, nil, nil)
		must(t, err)
		pair, err := tls.LoadX509KeyPair(c, k)
		must(t, err)
		return pair
	}
	carol, dave, forged := certOf(ca, "carol"), certOf(ca, "dave"), certOf(other, "carol")

	e := etcdtest.Start(t)
	reg := grain.NewRegistry()
	must(t, reg.Register("Worker", func(h grain.Host) (grain.Agent, error) { return worker{h}, nil }, grain.TypeInfo{Description: "Echoes."}))
	must(t, a2atest.Register(reg))
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "c0"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.DashboardAddr = "127.0.0.1:0"
	cfg.A2A.Addr = "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/uicert/"}
	cfg.Logger = testutil.Logger()
	cfg.Gateway.Auth.TLSCert, cfg.Gateway.Auth.TLSKey, cfg.Gateway.Auth.TLSClientCA = srvCert, srvKey, ca.CertFile
	s, err := cluster.NewSilo(cfg, reg)
	must(t, err)
	must(t, s.Start(t.Context()))
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx := t.Context()

	// The gateway, as carol and dave (their certificates), and as dave
	// vouching for carol.
	gw := func(cert tls.Certificate) agentsilov1.GatewayClient {
		conn, err := grpc.NewClient(s.GatewayAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}})))
		must(t, err)
		t.Cleanup(func() { conn.Close() })
		return agentsilov1.NewGatewayClient(conn)
	}
	asCarol, asDave := gw(carol), gw(dave)
	for _, a := range []string{"Worker:carol:w1", "Worker:carol:w2"} {
		_, err := asCarol.Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: a, Message: "hello"}})
		must(t, err)
	}
	_, err = asDave.Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Worker:dave:d1", Message: "hello"}})
	must(t, err)
	if _, err := asDave.ListAgents(metadata.AppendToOutgoingContext(ctx, vouchHeader, "carol"), &agentsilov1.ListAgentsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("dave vouching for carol on the gateway: %v, want Unauthenticated", err)
	}
	if _, err := asDave.Deactivate(metadata.AppendToOutgoingContext(ctx, vouchHeader, "carol"), &agentsilov1.DeactivateRequest{Agent: "Worker:carol:w2"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("dave vouching for carol to deactivate her agent: %v, want Unauthenticated", err)
	}
	listed := func(addr string) bool {
		r, err := asCarol.ListAgents(ctx, &agentsilov1.ListAgentsRequest{})
		if err != nil {
			return false
		}
		for _, a := range r.GetAgents() {
			if a.GetAddress() == addr {
				return true
			}
		}
		return false
	}
	testutil.WaitFor(t, "w2 still active", func() bool { return listed("Worker:carol:w2") })

	dash := "https://" + s.DashboardAddr()
	// client shows certs[0], if any, whichever CAs the server names (Go,
	// like a browser, would otherwise show only a certificate of one).
	client := func(certs ...tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: roots}
		if len(certs) > 0 {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
		}
		return &http.Client{
			Transport:     &http.Transport{TLSClientConfig: cfg},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	get := func(hc *http.Client, u string, hdr ...string) (int, string, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), string(b), nil
	}

	// A task of carol's, started over A2A with her certificate, working
	// until cancelled.
	a2aBase := "https://" + s.A2AAddr()
	taskID := a2aSend(t, client(carol), a2aBase, "Block/carol/b1", "")

	// Protocol: carol's certificate is carol, even when the request
	// claims a vouch; another CA's certificate fails the handshake; no
	// certificate gets the login page, which says a certificate is needed.
	code, _, body, err := get(client(carol), dash+"/ui/agents", vouchHeader, "dave", "x-agentsilo-principal", "dave")
	if err != nil || code != http.StatusOK || !strings.Contains(body, `class="who">carol`) {
		t.Errorf("carol's agents page: %d %v %.300q", code, err, body)
	}
	if _, _, _, err := get(client(forged), dash+"/ui/agents"); err == nil {
		t.Error("a certificate of another CA was accepted")
	}
	code, loc, _, err := get(client(), dash+"/ui/agents")
	if err != nil || code != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/login") {
		t.Errorf("no certificate: %d %q %v", code, loc, err)
	}
	if code, _, body, err := get(client(), dash+"/ui/login"); err != nil || !strings.Contains(body, `id="cert"`) || strings.Contains(body, `id="key"`) {
		t.Errorf("no certificate, the login page: %d %v %.400q", code, err, body)
	}
	// The plain HTTP port: no session without a certificate, whatever the
	// request says; its login page points to the TLS address.
	plain := "http://" + s.HTTPAddr()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, hdr := range [][]string{nil, {vouchHeader, "carol"}, {"x-agentsilo-principal", "carol"}} {
		code, loc, _, err := get(hc, plain+"/ui/agents", hdr...)
		if err != nil || code != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/login") {
			t.Errorf("plain HTTP with %v: %d %q %v", hdr, code, loc, err)
		}
	}
	if _, _, body, err := get(hc, plain+"/ui/login"); err != nil || !strings.Contains(body, dash+"/ui/") {
		t.Errorf("plain login page does not point to %s: %v %.400q", dash, err, body)
	}
	resp, err := hc.PostForm(plain+"/ui/login", url.Values{"key": {"anything"}})
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("plain HTTP key login on a certificate cluster: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}

	// The browser, through a proxy that shows carol's certificate. The
	// proxy keeps the browser's Host, so the dashboard's same-origin check
	// sees the origin the browser sends.
	target, _ := url.Parse(dash)
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.Out.Host = pr.In.Host },
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{carol}}},
	})
	t.Cleanup(proxy.Close)
	base := proxy.URL
	b, stop := browsertest.New(t, ctx, chromium, 1200, 760)
	defer stop()
	runT, run, text, eval := b.RunT, b.Run, b.Text, b.Eval
	waitText := func(sel, want string) {
		t.Helper()
		runT("wait for "+sel+" to say "+want, func(ctx context.Context) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`(document.querySelector(%q)||{}).innerText?.includes(%q)`, sel, want), chromedp.WithPollingInterval(100*time.Millisecond)))
			return err
		})
	}

	// No login page: the certificate is carol. Every page, as carol.
	run("cluster", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("members")))
	if got := text(".who"); strings.TrimSpace(got) != "carol" {
		t.Errorf("the dashboard says %q is logged in, want carol", got)
	}
	if n := eval(`document.querySelectorAll("#logout").length`, false); n != float64(0) {
		t.Errorf("a certificate's page offers to log out (%v buttons)", n)
	}
	if got := text("#members"); !strings.Contains(got, "c0") {
		t.Errorf("cluster page %q lacks c0", got)
	}
	run("agents", chromedp.Navigate(base+"/ui/agents"), chromedp.WaitVisible(chromedp.ID("agents")))
	mine, err := asCarol.ListAgents(ctx, &agentsilov1.ListAgentsRequest{})
	must(t, err)
	if got := text("#total"); !strings.HasPrefix(got, fmt.Sprintf("%d active agents", len(mine.GetAgents()))) || len(mine.GetAgents()) != 3 {
		t.Errorf("carol's agents page says %q, the gateway lists her %d", got, len(mine.GetAgents()))
	}
	for _, p := range []struct{ path, id string }{
		{"/ui/reminders?agent=Worker:carol:w1", "reminders"}, {"/ui/topics", "subscriptions"},
		{"/ui/directory", "directory"},
	} {
		run(p.path, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.ID(p.id)))
		if n := eval(`document.querySelectorAll("#error").length`, false); n != float64(0) {
			t.Errorf("%s shows an error: %q", p.path, text("#error"))
		}
	}
	// A2A: she cancels her task; the dashboard hands A2A her TLS
	// connection, as A2A's own clients show it theirs.
	run("a2a", chromedp.Navigate(base+"/ui/a2a"), chromedp.WaitVisible(chromedp.ID("tasks")))
	waitText("#tasks", string(taskID))
	eval(`window.confirm = () => true; true`, false)
	run("cancel", chromedp.Click(chromedp.CSS("#tasks button.cancel")))
	waitText("#flash", "Cancelled task "+string(taskID))
	if st := a2aState(t, client(carol), a2aBase, "Block/carol/b1", "", taskID); st != spec.TaskStateCanceled {
		t.Errorf("the task is %s after the cancel", st)
	}
	// The ACL is for administrators: carol is refused, as her CLI would be.
	run("acl", chromedp.Navigate(base+"/ui/acl"), chromedp.WaitVisible(chromedp.ID("error")))
	if got := text("#error"); !strings.Contains(got, "PermissionDenied") {
		t.Errorf("carol's ACL page says %q", got)
	}
	// Her own agent: deactivate it, after the confirmation.
	run("agent w1", chromedp.Navigate(base+"/ui/agent?addr=Worker:carol:w1"), chromedp.WaitVisible(chromedp.ID("deactivate")))
	eval(`window.__asked = null; window.confirm = q => { window.__asked = q; return true; }; true`, false)
	run("deactivate", chromedp.Click(chromedp.ID("deactivate")))
	waitText("#flash", "Deactivated Worker:carol:w1")
	if q := fmt.Sprint(eval(`window.__asked`, false)); !strings.HasPrefix(q, "Deactivate Worker:carol:w1?") {
		t.Errorf("the confirmation asked %q", q)
	}
	testutil.WaitFor(t, "w1 deactivated", func() bool { return !listed("Worker:carol:w1") })
	// dave's agent: no button for her, and a forged request with her own
	// valid token (from her w2's page) is refused by the gateway as carol.
	run("agent d1", chromedp.Navigate(base+"/ui/agent?addr=Worker:dave:d1"), chromedp.WaitVisible(chromedp.ID("addr")))
	if n := eval(`document.querySelectorAll("#deactivate").length`, false); n != float64(0) {
		t.Error("carol has a deactivate button on dave's agent")
	}
	run("agent w2", chromedp.Navigate(base+"/ui/agent?addr=Worker:carol:w2"), chromedp.WaitVisible(chromedp.ID("deactivate")))
	answer := eval(`fetch("/ui/agent/deactivate", {method: "POST", body: new URLSearchParams({agent: "Worker:dave:d1", csrf: document.querySelector("input[name=csrf]").value})}).then(r => r.text())`, true)
	if !strings.Contains(fmt.Sprint(answer), "Refused: PermissionDenied") {
		t.Errorf("carol's deactivate of dave's agent answered %q", answer)
	}
	daveListed := func() bool {
		r, err := asDave.ListAgents(ctx, &agentsilov1.ListAgentsRequest{})
		if err != nil {
			return false
		}
		for _, a := range r.GetAgents() {
			if a.GetAddress() == "Worker:dave:d1" {
				return true
			}
		}
		return false
	}
	testutil.WaitFor(t, "d1 still active after carol's refused deactivate", daveListed)

	// CSRF: carol's token is bound to her certificate: dave's certificate
	// with her token, and a request without one, are refused.
	_, _, page, err := get(client(carol), dash+"/ui/agent?addr=Worker:carol:w2")
	must(t, err)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token on carol's agent page")
	}
	post := func(cert tls.Certificate, form url.Values) int {
		resp, err := client(cert).PostForm(dash+"/ui/agent/deactivate", form)
		must(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(dave, url.Values{"agent": {"Worker:dave:d1"}, "csrf": {m[1]}}); code != http.StatusForbidden {
		t.Errorf("dave with carol's CSRF token: %d, want 403", code)
	}
	if code := post(carol, url.Values{"agent": {"Worker:carol:w2"}}); code != http.StatusForbidden {
		t.Errorf("carol without a CSRF token: %d, want 403", code)
	}
	testutil.WaitFor(t, "w2 still active", func() bool { return listed("Worker:carol:w2") })
}
