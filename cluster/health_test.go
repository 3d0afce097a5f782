package cluster

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/agentsilo/agentsilo/cluster/etcdstore"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// readyz returns the status and body of s's /readyz.
func readyz(t *testing.T, s *Silo) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestReadinessWithoutEtcd: a silo cut off from etcd is not ready, and says
// why and since when: first that etcd is unreachable, then that it is
// suspended; `members` says the other silos' state is unknown rather than
// alive. When etcd is back, the silo is ready again (or, if its lease did
// not survive, says it is fenced).
func TestReadinessWithoutEtcd(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	// s1 reaches etcd through a connection that the test cuts.
	link := newLink(t, c.etcd.Addr())
	defer link.close()
	defer c.close()
	s1 := c.startWith("s1", func(cfg *SiloConfig, _ *grain.Registry) {
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.Etcd = etcdstore.Config{Endpoints: []string{link.addr()}, Prefix: "/t"}
	})
	c.start("s2")
	c.waitView("s1", "s2")
	if code, body := readyz(t, s1); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz = %d %q, want 200 ready", code, body)
	}

	link.cut()
	var body string
	waitFor(t, "/readyz to say etcd is unreachable", func() bool {
		var code int
		code, body = readyz(t, s1)
		return code == http.StatusServiceUnavailable && (strings.Contains(body, "etcd unreachable since") || strings.Contains(body, "suspended since"))
	})
	t.Logf("/readyz: %s", body)

	conn, err := grpc.NewClient(s1.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	resp, err := agentsilov1.NewGatewayClient(conn).ListMembers(ctx, &agentsilov1.ListMembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.GetMembers() {
		t.Logf("member %s: %s", m.GetName(), m.GetState())
		switch {
		case m.GetSelf() && !strings.Contains(m.GetState(), "etcd unreachable"):
			t.Errorf("member %s (self) is %q, want it to say etcd is unreachable", m.GetName(), m.GetState())
		case !m.GetSelf() && !strings.HasPrefix(m.GetState(), "unknown: etcd unreachable since"):
			t.Errorf("member %s is %q, want unknown: etcd unreachable since ...", m.GetName(), m.GetState())
		}
	}

	waitFor(t, "/readyz to say the silo is suspended", func() bool {
		var code int
		code, body = readyz(t, s1)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "suspended since")
	})
	t.Logf("/readyz: %s", body)

	link.mend()
	waitFor(t, "/readyz to answer ready again, or fenced", func() bool {
		var code int
		code, body = readyz(t, s1)
		return code == http.StatusOK || strings.HasPrefix(body, "fenced:")
	})
	t.Logf("/readyz: %s", body)
}

// link forwards TCP connections to a server, until cut: then it drops
// every connection and refuses new ones, as a network cut would, until
// mended.
type link struct {
	t      *testing.T
	to     string
	listen string

	mu    sync.Mutex
	lis   net.Listener
	conns []net.Conn
	wg    sync.WaitGroup
}

func newLink(t *testing.T, to string) *link {
	l := &link{t: t, to: to}
	l.mend()
	l.listen = l.lis.Addr().String()
	return l
}

// close cuts the link and waits for its goroutines.
func (l *link) close() {
	l.cut()
	l.wg.Wait()
}

func (l *link) addr() string { return l.listen }

// mend listens again (on the same address after a cut).
func (l *link) mend() {
	l.t.Helper()
	addr := l.listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		l.t.Fatal(err)
	}
	l.mu.Lock()
	l.lis = lis
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", l.to)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, c, s)
			l.mu.Unlock()
			l.wg.Add(2)
			go func() { defer l.wg.Done(); io.Copy(s, c); s.Close() }()
			go func() { defer l.wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
}

// cut closes the listener and every connection.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lis != nil {
		l.lis.Close()
		l.lis = nil
	}
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}
