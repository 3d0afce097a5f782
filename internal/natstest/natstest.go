// Package natstest runs Debian's nats-server, with JetStream on file
// storage in a temporary directory, for tests: Start, then Kill and
// Restart on the same port and directory to test what survives the
// server's death.
package natstest

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// Server is a nats-server process with JetStream.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a nats-server on a free 127.0.0.1 port, skipping t (failing
// under CI) if the program is not installed, and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := testutil.NeedCommand(t, "nats-server", "Debian's nats-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{t: t, bin: bin, dir: filepath.Join(t.TempDir(), "nats"), port: port}
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// URL is the server's client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Restart starts the server (again, on its port and store directory) and
// waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("natstest: the server is running")
	}
	cmd := exec.Command(s.bin, "-js", "-sd", s.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	testutil.WaitFor(s.t, "nats-server to answer with JetStream", func() bool {
		nc, err := nats.Connect(s.URL(), nats.Timeout(time.Second))
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := nc.JetStream()
		if err != nil {
			return false
		}
		_, err = js.AccountInfo()
		return err == nil
	})
}

// Kill kills the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}
