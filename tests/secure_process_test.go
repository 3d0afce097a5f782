package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSecureSiloProcess runs the real programs with authentication: a
// gateway on a non-loopback address refuses to start without it, and serves
// with API keys, enforcing the ACL seeded from --acl-file.
func TestSecureSiloProcess(t *testing.T) {
	buildBinaries(t)
	dir := t.TempDir()
	_, port, err := net.SplitHostPort(freePort(t))
	if err != nil {
		t.Fatal(err)
	}

	// Without authentication, a non-loopback gateway is refused (exit 2).
	cmd := exec.Command(bins.silo, "--gateway-addr", "0.0.0.0:"+port, "--http-addr", "", "--data-dir", filepath.Join(dir, "refused"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "not loopback") {
		t.Fatalf("non-loopback gateway without authentication: %v\n%s", err, out)
	}

	hash := func(k string) string { h := sha256.Sum256([]byte(k)); return hex.EncodeToString(h[:]) }
	keys := filepath.Join(dir, "keys.json")
	aclFile := filepath.Join(dir, "acl.json")
	for path, content := range map[string]string{
		keys: fmt.Sprintf(`{"keys": [{"sha256": %q, "principal": "alice"}, {"sha256": %q, "principal": "ops", "groups": ["admins"]}]}`, hash("alice-key"), hash("ops-key")),
		aclFile: `{"Rules": [{"OwnerPattern": "system", "AgentPattern": "*", "CallerPattern": "*", "Permission": "Message,Read"},
			{"OwnerPattern": "bob", "AgentPattern": "shared-*", "CallerPattern": "alice", "Permission": "Message"}]}`,
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := startSilo(t, filepath.Join(dir, "data"), "--gateway-addr", "0.0.0.0:"+port, "--auth-file", keys, "--acl-file", aclFile)
	p.gateway = "127.0.0.1:" + port // the later --gateway-addr wins
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--api-key", "alice-key", "ask", "Echo:x", "hi"}, 0, "hi"},
		{[]string{"--api-key", "alice-key", "ask", "Echo:bob:shared-1", "hi"}, 0, "hi"},
		{[]string{"--api-key", "alice-key", "ask", "Echo:bob:private", "hi"}, 4, "error: PermissionDenied"},
		{[]string{"ask", "Echo:x", "hi"}, 4, "error: Unauthenticated"},
		{[]string{"--api-key", "nope", "ask", "Echo:x", "hi"}, 4, "error: Unauthenticated"},
		{[]string{"--api-key", "alice-key", "acl", "rules"}, 4, "error: PermissionDenied"},
		{[]string{"--api-key", "ops-key", "acl", "check", "--caller", "alice", "--perm", "Message", "bob:shared-1"}, 0, "allowed: rule 2 at position 2"},
	} {
		out, errOut, code := p.cli(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("client %s: exit %d, stdout %q, stderr %q; want exit %d and %q", clipArgs(c.args), code, out, errOut, c.code, c.want)
		}
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.stderr.String())
	}
	// The log (read once the process is gone) says how clients are proven.
	if !strings.Contains(p.stderr.String(), "gateway authenticates clients") {
		t.Errorf("the log does not say how clients are authenticated:\n%s", p.stderr.String())
	}
}
