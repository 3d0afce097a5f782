package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/certs/certstest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// A silo started into a secured cluster (peer mutual TLS, encrypted
// gossip) without its settings, or with another CA, refuses to join: it
// exits 1 with one line saying what differs, the cluster's silos log that
// they kept it out of their view, and calls through them go on with none
// failing.
func TestMismatchedSecurityRefused(t *testing.T) {
	dir := t.TempDir()
	ca, err := certstest.NewCA(dir, "cluster ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue("silo-peers", []string{"silo-peers"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherDir := filepath.Join(dir, "other")
	if err := os.Mkdir(otherDir, 0o700); err != nil {
		t.Fatal(err)
	}
	other, err := certstest.NewCA(otherDir, "other ca")
	if err != nil {
		t.Fatal(err)
	}
	otherCert, otherKey, err := other.Issue("silo-peers", []string{"silo-peers"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gossipKey := filepath.Join(dir, "gossip.key")
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gossipKey, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secured := []string{"--peer-tls-cert", cert, "--peer-tls-key", key, "--peer-tls-ca", ca.CertFile, "--peer-tls-name", "silo-peers", "--gossip-key-file", gossipKey}
	c := testcluster.Start(t, testcluster.Options{Silos: 2, Args: secured})
	bins, err := testcluster.Build()
	if err != nil {
		t.Fatal(err)
	}

	// Calls through both gateways, all the time.
	addrs := journalAddrs("secure", 20)
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.Ask(ctx, n%2, addrs[n%len(addrs)])
			cancel()
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				continue
			}
			ok.Add(1)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	testutil.WaitFor(t, "calls served", func() bool { return ok.Load() > 20 })

	for _, bad := range []struct {
		name string
		args []string
		// What the refused silo says, and what the cluster's say.
		want, wantGood string
	}{
		{"plain", nil, "peer TLS is off here and on there", "peer TLS is on here and off there"},
		{"other-ca", []string{"--peer-tls-cert", otherCert, "--peer-tls-key", otherKey, "--peer-tls-ca", other.CertFile, "--peer-tls-name", "silo-peers", "--gossip-key-file", gossipKey}, "no peer CA in common", "no peer CA in common"},
	} {
		name := "silo-" + bad.name
		args := append([]string{
			"--name", name, "--gateway-addr", "127.0.0.1:0", "--http-addr", "", "--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
			"--etcd-endpoints", strings.Join(c.EtcdEndpoints(), ","), "--etcd-prefix", c.EtcdPrefix(),
			"--data-dir", filepath.Join(dir, name), "--join", c.Silo(0).GossipAddr,
		}, bad.args...)
		ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitTimeout)
		cmd := exec.CommandContext(ctx, bins.Silo, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%s: %v, want exit 1\n%s", name, err, out.String())
		}
		if s := out.String(); !strings.Contains(s, "security settings do not match the cluster's") || !strings.Contains(s, bad.want) || !strings.Contains(s, "in the cluster before this one") {
			t.Errorf("%s's output does not say why it was refused (%q):\n%s", name, bad.want, s)
		}
		for i := range c.Len() {
			line := c.WaitLog(i, `"member":"`+name+`"`)
			if !strings.Contains(line, "kept out of the view") || !strings.Contains(line, bad.wantGood) {
				t.Errorf("%s's log line about %s: %s", c.Silo(i).Name, name, line)
			}
		}
	}
	// Calls go on, each silo still serving its share.
	served := ok.Load()
	testutil.WaitFor(t, "calls served after the refusals", func() bool { return ok.Load() > served+20 })
	c.WaitMembers(2)
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d calls failed; first: %v", n, n+ok.Load(), firstErr.Load())
	}
	t.Logf("%d calls, none failed", ok.Load())
}
