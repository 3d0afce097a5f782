package tests

import (
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExposedPeerPortRefused: the real program refuses (exit 2) to serve
// its peer or gossip port on a non-loopback address without mutual TLS and
// a gossip key, naming the flags that would secure them.
func TestExposedPeerPortRefused(t *testing.T) {
	buildBinaries(t)
	dir := t.TempDir()
	_, port, err := net.SplitHostPort(freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--peer-addr", "0.0.0.0:" + port}, "--peer-tls-cert"},
		{[]string{"--gossip-addr", "0.0.0.0:" + port}, "--gossip-key-file"},
	} {
		args := append([]string{"--http-addr", "", "--data-dir", filepath.Join(dir, "data")}, c.args...)
		out, err := exec.Command(bins.silo, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "not loopback") || !strings.Contains(string(out), c.want) {
			t.Errorf("silo %s: %v\n%s", strings.Join(c.args, " "), err, out)
		}
	}
}
