package membership

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/certs/certstest"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

func TestSecurityMismatch(t *testing.T) {
	ca1, ca2, k1, k2 := "aa", "bb", "k1", "k2"
	for _, c := range []struct {
		a, b Security
		want string
	}{
		{Security{}, Security{}, ""},
		{Security{PeerTLS: true, PeerCAs: ca1, GossipKeys: k1}, Security{PeerTLS: true, PeerCAs: ca1, GossipKeys: k1}, ""},
		{Security{PeerTLS: true, PeerCAs: "aa,bb", GossipKeys: "k1,k2"}, Security{PeerTLS: true, PeerCAs: ca2, GossipKeys: k1}, ""}, // rotation, step 1
		{Security{GossipKeys: "k2,k1"}, Security{GossipKeys: "k1,k2"}, ""},                                                          // step 2
		{Security{GossipKeys: "k2,k1"}, Security{GossipKeys: k2}, ""},                                                               // step 3
		{Security{GossipKeys: "k2,k1"}, Security{GossipKeys: k1}, "the gossip keys do not match: each silo's first key must be one the other has (--gossip-key-file: k2,k1 here, k1 there)"},
		{Security{PeerTLS: true, PeerCAs: ca1, GossipKeys: k1}, Security{}, "peer TLS is on here and off there (--peer-tls-cert, --peer-tls-key, --peer-tls-ca); gossip is encrypted here and in the clear there (--gossip-key-file)"},
		{Security{PeerTLS: true, PeerCAs: ca1}, Security{PeerTLS: true, PeerCAs: ca2}, "no peer CA in common (--peer-tls-ca: aa here, bb there)"},
		{Security{GossipKeys: k1}, Security{GossipKeys: k2}, "the gossip keys do not match: each silo's first key must be one the other has (--gossip-key-file: k1 here, k2 there)"},
	} {
		if got := c.a.Mismatch(c.b); got != c.want {
			t.Errorf("%v vs %v: %q, want %q", c.a, c.b, got, c.want)
		}
	}
}

// logBuffer is a log sink tests can read while the membership writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A silo whose peer CA or gossip key does not match the cluster's is
// refused at Start, saying what differs, and is never in the others' view,
// whose logs say why; one with the same settings (a rotation's common key
// is enough) joins.
func TestMembershipRefusesMismatchedSecurity(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)
	dir := t.TempDir()
	b64 := base64.StdEncoding.EncodeToString
	keyFile := func(name string, keys ...[]byte) string {
		var lines []string
		for _, k := range keys {
			lines = append(lines, b64(k))
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	var cas [2]string
	for i, name := range []string{"ca one", "ca two"} {
		ca, err := certstest.NewCA(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		cas[i] = ca.CertFile
	}
	cfg := func(name, key, ca string, log *logBuffer) Config {
		c := Config{Name: name, PeerAddr: "127.0.0.1:1", GossipAddr: "127.0.0.1:0", Client: cli, Prefix: testPrefix,
			KeyFile: key, PeerCAFile: ca, Logger: testLogger()}
		if log != nil {
			c.Logger = slog.New(slog.NewTextHandler(log, nil))
		}
		return c
	}
	var logA logBuffer
	a := startMember(t, cfg("a", keyFile("k1", k1), cas[0], &logA))
	defer a.Close()

	for _, c := range []struct {
		name, key, ca, want string
	}{
		{"plain", "", "", "peer TLS is off here and on there"},
		{"other-ca", keyFile("k1b", k1), cas[1], "no peer CA in common"},
		{"other-key", keyFile("k2", k2), cas[0], "the gossip keys do not match"},
	} {
		m, err := New(cfg(c.name, c.key, c.ca, nil))
		if err != nil {
			t.Fatal(err)
		}
		err = m.Start(t.Context())
		m.Close()
		if !errors.Is(err, ErrSecurityMismatch) || errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `silo "a"`) {
			t.Errorf("%s: Start: %v (%v); want ErrSecurityMismatch saying %q", c.name, err, errs.Code(err), c.want)
		}
		waitFor(t, c.name+"'s refusal in a's log", func() bool {
			return strings.Contains(logA.String(), "member="+c.name) && strings.Contains(logA.String(), "kept out of the view")
		})
		if _, in := a.View().Member(c.name); in {
			t.Errorf("%s is in a's view", c.name)
		}
	}
	waitFor(t, "the refused records gone", func() bool {
		r, err := cli.Get(context.Background(), testPrefix+"members/", clientv3.WithPrefix())
		return err == nil && len(r.Kvs) == 1
	})

	// The first step of a rotation: b has a second key.
	b := startMember(t, cfg("b", keyFile("k12", k1, k2), cas[0], nil))
	defer b.Close()
	waitMembers(t, []*Membership{a, b}, "a", "b")
	notFenced(t, a, b)
	if got := b.Security(); !got.Known || !got.PeerTLS || len(list(got.GossipKeys)) != 2 || len(list(got.PeerCAs)) != 1 {
		t.Errorf("b's fingerprint %v", got)
	}
}
