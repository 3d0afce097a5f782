package testcluster

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// natsServer is the NATS JetStream server of a cluster started with
// Options.NATS: a nats-server process (Debian's nats-server) on the
// harness's address (loopback, or the netns bridge's), with its store in
// the cluster's directory, so that it can be killed and started again on
// the same port with what it stored.
type natsServer struct {
	bin, dir, host string
	port           int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startNATS starts the cluster's NATS server; the silos get
// --topic-store with its URL.
func (c *Cluster) startNATS(host string) {
	c.tb.Helper()
	needCommand(c.tb, "nats-server", "Debian's nats-server")
	bin, _ := exec.LookPath("nats-server")
	addr, err := freeTCP(host)
	if err != nil {
		c.tb.Fatalf("%v", err)
	}
	_, port, _ := net.SplitHostPort(addr)
	n := &natsServer{bin: bin, dir: filepath.Join(c.dir, "nats"), host: host}
	n.port, _ = strconv.Atoi(port)
	c.nats = n
	c.tb.Cleanup(n.kill)
	c.RestartNATS()
}

// NATSURL is the URL of the cluster's NATS server ("" without
// Options.NATS).
func (c *Cluster) NATSURL() string {
	if c.nats == nil {
		return ""
	}
	return fmt.Sprintf("nats://%s", net.JoinHostPort(c.nats.host, strconv.Itoa(c.nats.port)))
}

// KillNATS kills the NATS server with SIGKILL and waits for it to exit.
func (c *Cluster) KillNATS() {
	if c.nats != nil {
		c.nats.kill()
	}
}

// RestartNATS starts the NATS server again, on its port and store
// directory, and waits until it answers with JetStream.
func (c *Cluster) RestartNATS() {
	c.tb.Helper()
	n := c.nats
	n.mu.Lock()
	if n.cmd != nil {
		n.mu.Unlock()
		c.tb.Fatalf("testcluster: the NATS server is running")
	}
	cmd := exec.Command(n.bin, "-js", "-sd", n.dir, "-a", n.host, "-p", strconv.Itoa(n.port))
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		c.tb.Fatalf("testcluster: start nats-server: %v", err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(n.done)
	n.mu.Unlock()
	url := c.NATSURL()
	c.waitFor("nats-server to answer with JetStream", func(context.Context) (bool, string) {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err != nil {
			return false, err.Error()
		}
		defer nc.Close()
		js, err := nc.JetStream()
		if err != nil {
			return false, err.Error()
		}
		if _, err := js.AccountInfo(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func (n *natsServer) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
	n.cmd = nil
}
