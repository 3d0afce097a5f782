package tests

import (
	"strings"
	"syscall"
	"testing"

	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// A whole cluster stopped at once (SIGTERM to every silo) exits 0 on every
// silo within its shutdown timeout, with no error logged: first with etcd
// up, then with etcd gone (killed, the silos suspended).
func TestWholeClusterStop(t *testing.T) {
	for _, etcdGone := range []bool{false, true} {
		name := "etcd up"
		if etcdGone {
			name = "etcd gone"
		}
		t.Run(name, func(t *testing.T) {
			opts := testcluster.Options{Silos: 3, Args: []string{"--shutdown-timeout", "15s"}}
			if etcdGone {
				opts.EtcdMembers = 1 // an etcd process, to kill
			}
			c := testcluster.Start(t, opts)
			for i := range c.Len() {
				for _, a := range journalAddrs("stop", 6) {
					if _, err := c.Ask(t.Context(), i, a); err != nil {
						t.Fatalf("ask %s via %s: %v", a, c.Silo(i).Name, err)
					}
				}
			}
			if etcdGone {
				c.Etcd().Kill(0)
				for i := range c.Len() {
					c.WaitLog(i, "suspended: no lease keepalive")
				}
			}
			for i := range c.Len() {
				if err := syscall.Kill(c.PID(i), syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			for i := range c.Len() {
				if code := c.WaitExited(i); code != 0 {
					t.Errorf("%s exited %d after SIGTERM, want 0", c.Silo(i).Name, code)
				}
			}
			for i := range c.Len() {
				for _, l := range strings.Split(c.LogTail(i, 200), "\n") {
					if strings.Contains(l, `"level":"ERROR"`) {
						t.Errorf("%s logged an error while stopping: %s", c.Silo(i).Name, l)
					}
				}
			}
		})
	}
}
