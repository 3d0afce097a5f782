package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
		// pid 500's silo stopped at 3000 and fenced; a new silo in the same
		// process activated i again, after s1 had it for a while.
		"start J:o:i s0 500 1000",
		"start J:o:i s1 200 3500",
		"end J:o:i s1 200 3900 moved",
		"start J:o:i s0 500 4000",
		"end J:o:i s0 500 6000 moved", // the new silo's i, not the first
		// pid 600 died at 8000, suspended since 2000.
		"start J:o:j s0 600 1000",
		"start J:o:j s1 200 3000", // after j's suspension: no overlap
		"start J:o:k s0 600 1000",
		"turn J:o:k s0 600 2500", // ran after its suspension ended
		"start J:o:k s1 200 2200",
		// pid 700 froze at 2000, fenced on its thaw at 3000, and froze
		// again at 6000 with a new silo: l ended at the first freeze.
		"start J:o:l s0 700 1000",
		"start J:o:l s1 200 2500", // after l's freeze: no overlap
		"",
	}, "\n")
	if err := os.WriteFile(path, []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}
	lives := map[int]Life{
		100: {Died: time.Unix(0, 5000)},
		400: {Died: time.Unix(0, 8000), Freezes: []time.Time{time.Unix(0, 3000)}},
		500: {Fenced: []time.Time{time.Unix(0, 3000)}},
		600: {Died: time.Unix(0, 8000), Suspended: time.Unix(0, 2000)},
		700: {Fenced: []time.Time{time.Unix(0, 3000)}, Freezes: []time.Time{time.Unix(0, 2000), time.Unix(0, 6000)}},
	}
	acts, err := ReadJournal(path, lives)
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 25 {
		t.Fatalf("%d activations, want 25: %v", len(acts), acts)
	}
	if b := acts[2]; b.Address != "J:o:b" || !b.Ended || b.Reason != "moved" {
		t.Errorf("the first b: %+v, want it ended, moved", b)
	}
	var got []string
	for _, o := range Overlaps(acts) {
		got = append(got, o.A.Address+"/"+o.A.Silo+"+"+o.B.Silo)
	}
	want := []string{"J:o:b/s0+s1", "J:o:c/s0+s1", "J:o:e/s0+s0", "J:o:g/s0+s1", "J:o:h/s0+s1", "J:o:k/s0+s1"}
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

// TestFencesIn reads when a process's silos stopped from its log: at a
// fence, when its suspension began if it was suspended (a resumed
// suspension counts for nothing); a suspension left at the end of the log
// is reported apart.
func TestFencesIn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	log := strings.Join([]string{
		"=== testcluster 2026-11-23T21:00:00Z pid 500 started",
		`{"time":"2026-11-23T21:00:01Z","msg":"suspended: no lease keepalive succeeded","since":"2026-11-23T21:00:00.5Z"}`,
		`{"time":"2026-11-23T21:00:02Z","msg":"resumed: a lease keepalive succeeded"}`,
		`{"time":"2026-11-23T21:00:03Z","msg":"fenced"}`, // not suspended: at the fence
		`{"time":"2026-11-23T21:00:04Z","msg":"suspended: no lease keepalive succeeded","since":"2026-11-23T21:00:03.5Z"}`,
		`{"time":"2026-11-23T21:00:05Z","msg":"fenced"}`, // suspended: at its start
		`{"time":"2026-11-23T21:00:06Z","msg":"suspended: no lease keepalive succeeded","since":"2026-11-23T21:00:05.5Z"}`,
		"=== testcluster 2026-11-23T21:01:00Z pid 600 started",
		`{"time":"2026-11-23T21:01:01Z","msg":"fenced"}`,
		// The fenced silo's keepalive loop, a moment after its fence: not
		// the next silo's suspension (chaos once took it for one, and ended
		// the next silo's activations before they started).
		`{"time":"2026-11-23T21:01:01.002Z","msg":"suspended: no lease keepalive succeeded","since":"2026-11-23T21:01:00.7Z","lease":"a"}`,
		`{"time":"2026-11-23T21:01:09Z","msg":"fenced"}`, // not suspended: at the fence
		`{"time":"2026-11-23T21:01:11Z","msg":"suspended: no lease keepalive succeeded","since":"2026-11-23T21:01:10Z","lease":"c"}`,
		`{"time":"2026-11-23T21:01:12Z","msg":"resumed: a lease keepalive succeeded","lease":"b"}`, // another silo's
		"",
	}, "\n")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, "2026-11-23T"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	fences, suspended := fencesIn(path)
	if got, want := fences[500], []time.Time{at("21:00:03"), at("21:00:03.5")}; !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("pid 500 fenced %v, want %v", got, want)
	}
	if got, want := fences[600], []time.Time{at("21:01:01"), at("21:01:09")}; !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("pid 600 fenced %v, want %v", got, want)
	}
	if got := suspended[500]; !got.Equal(at("21:00:05.5")) {
		t.Errorf("pid 500 suspended at the end since %v, want 21:00:05.5", got)
	}
	if got := suspended[600]; !got.Equal(at("21:01:10")) {
		t.Errorf("pid 600 suspended at the end since %v, want 21:01:10", got)
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
		return r.Message
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

// TestCheckDir: a kept cluster directory is checked from its files alone:
// the harness's marks in the logs give each process's freezes and death.
func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	ts := func(sec int) string { return time.Unix(int64(sec), 0).UTC().Format(time.RFC3339Nano) }
	ns := func(sec int) int64 { return time.Unix(int64(sec), 0).UnixNano() }
	files := map[string]string{
		"silo-0.log": "=== testcluster " + ts(0) + ": pid 100 started\n" +
			"=== testcluster " + ts(5) + ": pid 100 frozen\n" +
			"=== testcluster " + ts(9) + ": pid 100 ended: signal: killed\n",
		"silo-1.log": "=== testcluster " + ts(0) + ": pid 200 started\n",
		"journal": fmt.Sprintf("start A silo-0 100 %d\nturn A silo-0 100 %d\nstart B silo-0 100 %d\nstart B silo-1 200 %d\nstart A silo-1 200 %d\n",
			ns(1), ns(2), ns(1), ns(4), ns(6)),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	acts, over, err := CheckDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 4 {
		t.Fatalf("%d activations, want 4: %v", len(acts), acts)
	}
	// A on pid 100 ended at the freeze (killed frozen), before silo-1's;
	// B on pid 100 was live when silo-1 started B.
	if len(over) != 1 || over[0].A.Address != "B" {
		t.Fatalf("overlaps %v, want B's only", over)
	}
}

// TestStartConcurrency: with a window of 1, each silo is started only once
// the one before it has joined the cluster (its log says so before the
// next one's first line).
func TestStartConcurrency(t *testing.T) {
	c := Start(t, Options{Silos: 3, StartConcurrency: 1})
	for i := 1; i < c.Len(); i++ {
		joined := logTime(t, c.Silo(i-1).LogPath, `"joined the cluster"`)
		started := logTime(t, c.Silo(i).LogPath, "=== testcluster ")
		if !started.After(joined) {
			t.Errorf("%s started at %v, before %s joined at %v", c.Silo(i).Name, started, c.Silo(i-1).Name, joined)
		}
	}
}

// logTime is the time of the first line of the log at path that contains
// s: a harness line's, or a JSON line's "time".
func logTime(t *testing.T, path, s string) time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.Contains(line, s) {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "=== testcluster "); ok {
			ts, _, _ := strings.Cut(rest, ": ")
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			return at
		}
		var rec struct {
			Time time.Time `json:"time"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Time.IsZero() {
			t.Fatalf("%s: %q: no time (%v)", path, line, err)
		}
		return rec.Time
	}
	t.Fatalf("%s has no line with %q", path, s)
	return time.Time{}
}
