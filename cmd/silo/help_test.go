package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProductionHasNoTestHooks builds `silo` as a user does (no build
// tags) and checks that its --help shows no test flag and that the binary
// holds no fault injection and no test agents: those are built only with
// the agentsilo_testhooks tag (testhooks.go here and in package cluster),
// which tests/testcluster uses.
func TestProductionHasNoTestHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the silo binary")
	}
	bin := filepath.Join(t.TempDir(), "silo")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(help), "-gateway-addr") {
		t.Fatalf("silo --help does not list the flags:\n%s", help)
	}
	for _, flag := range []string{"fault-injection", "journal", "debug/partition"} {
		if strings.Contains(string(help), flag) {
			t.Errorf("silo --help mentions %q:\n%s", flag, help)
		}
	}
	if out, err := exec.Command(bin, "--journal", "j", "--version").CombinedOutput(); err == nil {
		t.Errorf("silo --journal is accepted: %s", out)
	}
	syms, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	for _, sym := range []string{"agentsilo/internal/faults.", "demoagents.RegisterJournal", "demoagents.RegisterTopicSink", "main.registerWaiter", "main.registerSessionPusher", "main.registerTally"} {
		if strings.Contains(string(syms), sym) {
			t.Errorf("the production binary holds %s", sym)
		}
	}
}
