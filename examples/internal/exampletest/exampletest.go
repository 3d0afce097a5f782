// Package exampletest runs an example program the way its README does: it
// builds the program, starts it as one silo on free loopback ports with an
// embedded etcd in a temporary directory, and waits until its gateway
// serves, so that each example's test can call it with the Go SDK.
package exampletest

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// Program is a running example program.
type Program struct {
	// Gateway is the silo's gateway address, for client.Dial.
	Gateway string
}

// Start builds the main package in the current directory (the example's)
// and runs it with env added to its environment and args after the
// addresses; it stops the program at the test's end (SIGTERM, expecting a
// clean exit) and prints its log if the test failed.
func Start(t *testing.T, env []string, args ...string) *Program {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "example")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := &Program{Gateway: testutil.FreeAddr(t)}
	cmd := exec.Command(bin, append([]string{
		"--name", "example", "--data-dir", filepath.Join(dir, "data"),
		"--embedded-etcd-addr", testutil.FreeAddrPair(t),
		"--gateway-addr", p.Gateway, "--http-addr", testutil.FreeAddr(t),
		"--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
	}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	log := new(testutil.SyncBuffer)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			<-exited
			if waitErr != nil {
				t.Errorf("the example after SIGTERM: %v", waitErr)
			}
		}
		if t.Failed() {
			t.Logf("the example's log:\n%s", log)
		}
	})
	testutil.WaitFor(t, "the example to serve", func() bool {
		select {
		case <-exited:
			t.Fatalf("the example exited: %v\n%s", waitErr, log)
		default:
		}
		c, err := client.Dial(t.Context(), []string{p.Gateway}, client.WithPrincipal("test"))
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Admin().Members(t.Context())
		return err == nil
	})
	return p
}
