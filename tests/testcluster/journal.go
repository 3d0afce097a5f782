package testcluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Life is what the harness saw of an ended silo process, for the journal
// checker.
type Life struct {
	// Died is when the process ended (when the harness saw it end), or when
	// it was frozen if it was killed frozen: it ran nothing after that.
	Died time.Time
	// Freezes are the process's freezes (Cluster.Freeze), in order. An
	// activation that started before the last one and has no end line ends
	// at its last journal line after that freeze, or at the freeze: frozen,
	// it ran nothing, and thawed, whatever turn it ran is in the journal.
	// Before a fence, the last freeze before the fence counts.
	Freezes []time.Time
	// Fenced are the times the process's silo stopped for good before it
	// fenced itself: when it was suspended (it runs no turn from then on),
	// if it was suspended when it fenced, else when it logged that it
	// fenced. Its activations from before ended then (or at the freeze
	// before it, or at their last journal line, if later), though the
	// process goes on with a new silo. Died is zero while it runs.
	Fenced []time.Time
	// Suspended is when the process's silo was suspended, if it still was
	// when its log ended (it died suspended): its activations ran nothing
	// after that but what the journal shows.
	Suspended time.Time
}

// fencesIn reads a silo's log: for each of its processes (by pid), when
// its silos stopped before they fenced (see Life.Fenced), and when it was
// suspended if it still was at the end of the log (Life.Suspended).
func fencesIn(path string) (map[int][]time.Time, map[int]time.Time) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	fences, suspended := map[int][]time.Time{}, map[int]time.Time{}
	pid := 0
	var (
		since      time.Time // the current suspension of pid's silo
		sinceLease string    // the lease of the silo that logged it
		lastFence  time.Time // when pid's last silo fenced
	)
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "=== testcluster "); ok {
			var ts string
			var n int
			if _, err := fmt.Sscanf(rest, "%s pid %d started", &ts, &n); err == nil {
				pid, since, sinceLease, lastFence = n, time.Time{}, "", time.Time{}
			}
			continue
		}
		if pid == 0 || !strings.Contains(line, `"msg":"`) {
			continue
		}
		var rec struct {
			Time  time.Time `json:"time"`
			Msg   string    `json:"msg"`
			Since time.Time `json:"since"`
			Lease string    `json:"lease"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Time.IsZero() {
			continue
		}
		switch {
		case strings.HasPrefix(rec.Msg, "suspended:"):
			at := rec.Since
			if at.IsZero() {
				at = rec.Time
			}
			if !lastFence.IsZero() && !at.After(lastFence) {
				// The fenced silo's keepalive loop, still running for a
				// moment after its fence: not the new silo's suspension
				// (whose lease was granted after the fence).
				continue
			}
			since, sinceLease = at, rec.Lease
			suspended[pid] = since
		case strings.HasPrefix(rec.Msg, "resumed:"):
			if rec.Lease != "" && sinceLease != "" && rec.Lease != sinceLease {
				continue // a fenced silo's, not the suspended one's
			}
			since, sinceLease = time.Time{}, ""
			delete(suspended, pid)
		case rec.Msg == "fenced":
			at := rec.Time
			if !since.IsZero() && since.Before(at) {
				at = since
			}
			fences[pid] = append(fences[pid], at)
			since, sinceLease, lastFence = time.Time{}, "", rec.Time
			delete(suspended, pid)
		}
	}
	return fences, suspended
}

// Activation is one activation of an address, read from the journal that
// the Journal agents write (see demoagents.Journal).
type Activation struct {
	Address string
	Silo    string
	PID     int
	Start   time.Time
	// Last is the time of its last line before the end: the start or its
	// last turn.
	Last time.Time
	// End is when the activation ended: its "end" line, or, without one,
	// when its process died or froze (see Life; Ended is then false). Zero
	// while it may still be live: no end line and its process still runs.
	End   time.Time
	Ended bool
	// Reason is why it ended, from its end line (grain.Reason: idle,
	// shutdown, moved...), empty without one.
	Reason string
	// Line is the journal line number of the start.
	Line int
}

func (a Activation) String() string {
	end := "still live"
	switch {
	case a.Ended:
		end = a.End.Format("15:04:05.000000") + " (" + a.Reason + ")"
	case !a.End.IsZero():
		end = a.End.Format("15:04:05.000000") + " (its process died or froze)"
	}
	return fmt.Sprintf("%s on %s (pid %d) from %s to %s", a.Address, a.Silo, a.PID, a.Start.Format("15:04:05.000000"), end)
}

// overlaps reports whether a and b were live at the same time (End zero:
// live from Start on).
func (a Activation) overlaps(b Activation) bool {
	// Half-open intervals [Start, End): one that ends at the instant the
	// other starts does not overlap it.
	aEndsAfterB := a.End.IsZero() || a.End.After(b.Start)
	bEndsAfterA := b.End.IsZero() || b.End.After(a.Start)
	return aEndsAfterB && bEndsAfterA
}

// Overlap is two activations of one address live at the same time.
type Overlap struct{ A, B Activation }

func (o Overlap) String() string { return fmt.Sprintf("%v overlaps %v", o.A, o.B) }

// ReadJournal reads the journal at path and pairs each "start" with the
// next "end" of the same address in the same process, noting the "turn"
// lines between. An activation without an end ends as its process's Life in
// lives (by pid) says; if its pid is not in lives, it may still be live.
func ReadJournal(path string, lives map[int]Life) ([]Activation, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type key struct {
		addr string
		pid  int
	}
	var acts []Activation
	open := map[key][]int{} // indexes into acts, oldest first
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) != 5 && !(len(fields) == 6 && fields[0] == "end") || fields[0] != "start" && fields[0] != "turn" && fields[0] != "end" {
			return nil, fmt.Errorf("%s:%d: malformed line %q", path, n, sc.Text())
		}
		pid, err1 := strconv.Atoi(fields[3])
		nanos, err2 := strconv.ParseInt(fields[4], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s:%d: malformed line %q", path, n, sc.Text())
		}
		k := key{fields[1], pid}
		at := time.Unix(0, nanos)
		if fields[0] == "start" {
			// An activation still open from before a fence of its process
			// was torn down with its silo: no end line comes for it, and
			// the end lines from here on are the new silo's.
			if fenced := lives[pid].Fenced; len(fenced) > 0 {
				open[k] = slices.DeleteFunc(open[k], func(i int) bool {
					return slices.ContainsFunc(fenced, func(f time.Time) bool { return !f.Before(acts[i].Start) && f.Before(at) })
				})
			}
			open[k] = append(open[k], len(acts))
			acts = append(acts, Activation{Address: fields[1], Silo: fields[2], PID: pid, Start: at, Last: at, Line: n})
			continue
		}
		if len(open[k]) == 0 {
			return nil, fmt.Errorf("%s:%d: %s without a start: %q", path, n, fields[0], sc.Text())
		}
		i := open[k][0]
		if fields[0] == "turn" {
			// Two open activations of one address in one process: the turn
			// is the newest's, which the runtime would route to.
			i = open[k][len(open[k])-1]
			if at.After(acts[i].Last) {
				acts[i].Last = at
			}
			continue
		}
		open[k] = open[k][1:]
		acts[i].End, acts[i].Ended = at, true
		if len(fields) == 6 {
			acts[i].Reason = fields[5]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i := range acts {
		a := &acts[i]
		if a.Ended {
			continue
		}
		life, ok := lives[a.PID]
		if j := slices.IndexFunc(life.Fenced, func(f time.Time) bool { return !f.Before(a.Start) }); j >= 0 {
			a.End = life.Fenced[j]
			if fz := lastBefore(life.Freezes, a.End); !fz.IsZero() && a.Start.Before(fz) {
				// Frozen, then fenced on resume: it ran nothing after the
				// freeze but what the journal shows.
				a.End = fz
			}
			if a.Last.After(a.End) {
				a.End = a.Last
			}
			continue
		}
		switch {
		case !ok || life.Died.IsZero(): // the process may still run
		case len(life.Freezes) > 0 && a.Start.Before(life.Freezes[len(life.Freezes)-1]):
			a.End = life.Freezes[len(life.Freezes)-1]
			if a.Last.After(a.End) {
				a.End = a.Last
			}
		default:
			a.End = life.Died
		}
		if s := life.Suspended; !a.End.IsZero() && !s.IsZero() && a.Start.Before(s) && s.Before(a.End) {
			// It died suspended: it ran nothing after the suspension but
			// what the journal shows.
			a.End = s
			if a.Last.After(a.End) {
				a.End = a.Last
			}
		}
	}
	return acts, nil
}

// CheckDir checks the journal a cluster left in dir (kept with
// TESTCLUSTER_KEEP) from what its files hold: the journal, and the silos'
// logs, in which the harness marks each process's start, end, freezes and
// thaws. It returns the activations and the overlapping pairs, as
// CheckJournal would have found them.
func CheckDir(dir string) ([]Activation, []Overlap, error) {
	logs, err := filepath.Glob(filepath.Join(dir, "silo-*.log"))
	if err != nil {
		return nil, nil, err
	}
	lives := map[int]Life{}
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		frozen := map[int]time.Time{}
		for line := range strings.SplitSeq(string(b), "\n") {
			rest, ok := strings.CutPrefix(line, "=== testcluster ")
			if !ok {
				continue
			}
			var ts, what string
			var pid int
			if _, err := fmt.Sscanf(rest, "%s pid %d %s", &ts, &pid, &what); err != nil {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, strings.TrimSuffix(ts, ":"))
			if err != nil {
				continue
			}
			l := lives[pid]
			switch what {
			case "frozen":
				frozen[pid], l.Freezes = at, append(l.Freezes, at)
			case "thawed":
				delete(frozen, pid)
			case "ended:":
				// Killed frozen: it ran nothing after the freeze.
				if l.Died = at; !frozen[pid].IsZero() {
					l.Died = frozen[pid]
				}
			default:
				continue
			}
			lives[pid] = l
		}
		fences, suspended := fencesIn(path)
		for pid, f := range fences {
			l := lives[pid]
			l.Fenced = f
			lives[pid] = l
		}
		for pid, since := range suspended {
			if l := lives[pid]; !l.Died.IsZero() {
				l.Suspended = since
				lives[pid] = l
			}
		}
	}
	acts, err := ReadJournal(filepath.Join(dir, "journal"), lives)
	if err != nil {
		return nil, nil, err
	}
	return acts, Overlaps(acts), nil
}

// lastBefore returns the last of times (in order) before t, zero if none.
func lastBefore(times []time.Time, t time.Time) time.Time {
	var last time.Time
	for _, x := range times {
		if !x.Before(t) {
			break
		}
		last = x
	}
	return last
}

// Overlaps returns every pair of activations of one address that were live
// at the same time.
func Overlaps(acts []Activation) []Overlap {
	by := map[string][]Activation{}
	for _, a := range acts {
		by[a.Address] = append(by[a.Address], a)
	}
	addrs := make([]string, 0, len(by))
	for a := range by {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var out []Overlap
	for _, addr := range addrs {
		as := by[addr]
		sort.SliceStable(as, func(i, j int) bool { return as[i].Start.Before(as[j].Start) })
		for i := range as {
			// Sorted by start: only later starts before as[i]'s end can
			// overlap it.
			for j := i + 1; j < len(as) && (as[i].End.IsZero() || as[j].Start.Before(as[i].End)); j++ {
				if as[i].overlaps(as[j]) {
					out = append(out, Overlap{as[i], as[j]})
				}
			}
		}
	}
	return out
}

// CheckJournal reads the journal and fails the test (Errorf) for every two
// activations of one address that overlap in time; it returns the
// activations for further checks.
func (c *Cluster) CheckJournal() []Activation {
	c.tb.Helper()
	acts, err := ReadJournal(c.journal, c.Lives())
	if err != nil {
		c.tb.Fatalf("testcluster: journal: %v", err)
	}
	over := Overlaps(acts)
	for _, o := range over {
		c.tb.Errorf("testcluster: two live activations: %v", o)
	}
	c.tb.Logf("testcluster: journal: %d activations, %d overlapping pairs", len(acts), len(over))
	return acts
}
