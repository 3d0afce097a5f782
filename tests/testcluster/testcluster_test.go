package testcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(Main(m)) }

func TestOverlaps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	journal := strings.Join([]string{
		"start J:o:a s0 100 1000",
		"end J:o:a s0 100 2000",
		"start J:o:a s1 200 2000", // starts as the first ends: no overlap
		"start J:o:b s0 100 1500",
		"end J:o:b s0 100 1600 moved",
		"start J:o:b s1 200 1550", // overlaps the b on s0
		"start J:o:c s0 100 1000", // no end, pid 100 died at 5000
		"start J:o:c s1 200 4000", // overlaps c on s0 before its death
		"start J:o:d s0 100 1000", // no end, pid 100 died at 5000
		"start J:o:d s1 200 5000", // starts at the death: no overlap
		"start J:o:e s0 300 1000", // pid 300 still runs: live
		"start J:o:e s0 300 9000", // a second activation in the same process
		// pid 400 froze at 3000, was thawed, and exited at 8000.
		"start J:o:f s0 400 1000",
		"turn J:o:f s0 400 3500",  // after the thaw
		"start J:o:f s1 200 4000", // after f's last sign of life: no overlap
		"start J:o:g s0 400 1000",
		"start J:o:g s1 200 4000",
		"turn J:o:g s0 400 5000",  // g on s0 still ran after g on s1 started
		"start J:o:h s0 400 6000", // started after the thaw: lives until the exit
		"start J:o:h s1 200 7000",
		"",
	}, "\n")
	if err := os.WriteFile(path, []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}
	lives := map[int]Life{
		100: {Died: time.Unix(0, 5000)},
		400: {Died: time.Unix(0, 8000), Froze: time.Unix(0, 3000)},
	}
	acts, err := ReadJournal(path, lives)
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 16 {
		t.Fatalf("%d activations, want 16: %v", len(acts), acts)
	}
	if b := acts[2]; b.Address != "J:o:b" || !b.Ended || b.Reason != "moved" {
		t.Errorf("the first b: %+v, want it ended, moved", b)
	}
	var got []string
	for _, o := range Overlaps(acts) {
		got = append(got, o.A.Address+"/"+o.A.Silo+"+"+o.B.Silo)
	}
	want := []string{"J:o:b/s0+s1", "J:o:c/s0+s1", "J:o:e/s0+s0", "J:o:g/s0+s1", "J:o:h/s0+s1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("overlaps %v, want %v", got, want)
	}
	if err := os.WriteFile(path, []byte("end J:o:a s0 1 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadJournal(path, nil); err == nil {
		t.Error("an end without a start: no error")
	}
}

// TestOneSilo drives one silo through the harness: ask, kill -9, restart,
// graceful stop, and the journal across all of it.
func TestOneSilo(t *testing.T) {
	// A short lease: the restarted silo rejoins under its old name once the
	// killed one's lease expires (no other silo is there to revoke it).
	c := Start(t, Options{Silos: 1, Args: []string{"--lease-ttl", "3s"}})
	s := c.Silo(0)
	cl := c.Client(t)
	ask := func(addr string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		r, err := cl.Ask(ctx, addr, &client.Message{Message: "hi"})
		if err != nil {
			t.Fatalf("ask %s: %v", addr, err)
		}
		return r.GetMessage()
	}
	if got := ask("Journal:test:a"); got != s.Name {
		t.Fatalf("Journal answered %q, want %q", got, s.Name)
	}
	c.WaitOwner("Journal:test:a", s.Name)
	c.Kill(0)
	if c.Running(0) || len(c.Live()) != 0 {
		t.Fatal("killed silo still running")
	}
	c.Restart(0)
	c.WaitOwner("Journal:test:a", s.Name) // a new activation in the new process
	c.WaitMembers(1)
	c.Stop(0)
	acts := c.CheckJournal()
	if len(acts) != 2 {
		t.Fatalf("journal has %d activations, want 2: %v", len(acts), acts)
	}
	if acts[0].Ended || acts[0].End.IsZero() {
		t.Errorf("the killed activation: %v, want it to end at the kill", acts[0])
	}
	if !acts[1].Ended {
		t.Errorf("the stopped activation: %v, want an end line", acts[1])
	}
}
