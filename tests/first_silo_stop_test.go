package tests

import (
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The silo that runs the embedded etcd (the first silo of "Running a
// cluster") restarted gracefully: the other silo waits for etcd, neither
// fences nor starts again, and keeps its activations; every stop exits 0.
func TestFirstSiloRestartKeepsOthers(t *testing.T) {
	buildBinaries(t)
	first := startSilo(t, t.TempDir(), "--name", "first")
	etcdAddr := first.args[slices.Index(first.args, "--embedded-etcd-addr")+1]
	second := startSilo(t, t.TempDir(), "--name", "second", "--etcd-endpoints", "http://"+etcdAddr)

	for i := range 12 {
		second.mustAsk("Echo:keep-"+string(rune('a'+i)), "hi")
	}
	on := func() []string {
		out, errOut, code := second.cli("agents")
		if code != 0 {
			t.Fatalf("agents: exit %d: %s", code, errOut)
		}
		var lines []string
		for l := range strings.SplitSeq(out, "\n") {
			if strings.Contains(l, "keep-") && strings.Contains(l, "second") {
				lines = append(lines, strings.Fields(l)[0])
			}
		}
		slices.Sort(lines)
		return lines
	}
	before := on()
	if len(before) == 0 {
		t.Fatalf("no activation on the second silo")
	}

	if code := first.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("first silo: exit %d after SIGTERM\n%s", code, first.stderr.String())
	}
	first.start() // the same data directory and etcd address
	second.waitReady()
	if after := on(); !slices.Equal(after, before) {
		t.Errorf("activations on the second silo: %v before the first's restart, %v after", before, after)
	}
	if code := second.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("second silo: exit %d after SIGTERM", code)
	}
	if code := first.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("first silo: exit %d after SIGTERM\n%s", code, first.stderr.String())
	}
	if log := second.stderr.String(); strings.Contains(log, "msg=fenced") || strings.Contains(log, "after fencing") {
		t.Errorf("the second silo fenced while the first restarted:\n%s", log)
	}
}
