package testcluster

import (
	"os/exec"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// need ends tb when ok is false, saying what it needs: a test (a
// testing.TB) is skipped on a contributor's machine and fails under CI (see
// testutil.Need); a program's TB fails.
func need(tb TB, ok bool, what string) {
	tb.Helper()
	if ok {
		return
	}
	if t, isTest := tb.(testing.TB); isTest {
		testutil.Need(t, false, what)
		return
	}
	tb.Fatalf("testcluster: needs %s", what)
}

// needCommand is need for a program on PATH; pkg says where it comes from.
func needCommand(tb TB, name, pkg string) {
	tb.Helper()
	_, err := exec.LookPath(name)
	need(tb, err == nil, name+" ("+pkg+")")
}
