package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// Need skips t with one line naming what it needs when ok is false: a
// contributor's machine need not have root, etcd-server, nftables,
// PostgreSQL or node. Under CI (CI=true), which installs all of them, a
// missing requirement fails the test instead, so a tier cannot silently go
// unrun.
func Need(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("needs %s (CI installs it: see .ci/run)", what)
	}
	t.Skipf("needs %s (bash .ci/run installs it; see CONTRIBUTING.md)", what)
}

// NeedCommand returns the path of the program name, skipping t (see Need)
// when it is not installed; pkg says where it comes from, e.g. "the Debian
// package etcd-server".
func NeedCommand(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	Need(t, err == nil, name+" ("+pkg+")")
	return p
}

// NeedRoot skips t (see Need) unless the test runs as root, which network
// namespaces, firewall rules and some fault tests require.
func NeedRoot(t testing.TB) {
	t.Helper()
	Need(t, os.Geteuid() == 0, "root")
}
