package llm

import (
	"strings"
	"testing"
	"time"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("no time zone %s on this machine: %v", name, err)
	}
	return loc
}

// firings returns the first n firings of expr after from.
func firings(t *testing.T, expr string, from time.Time, n int) []time.Time {
	t.Helper()
	c, err := parseCron(expr)
	if err != nil {
		t.Fatalf("parse %q: %v", expr, err)
	}
	var out []time.Time
	at := from
	for range n {
		next, ok := c.next(at)
		if !ok {
			t.Fatalf("%q: no firing after %v", expr, at)
		}
		out = append(out, next)
		at = next
	}
	return out
}

func checkFirings(t *testing.T, expr string, from time.Time, want ...string) {
	t.Helper()
	got := firings(t, expr, from, len(want))
	for i, w := range want {
		if g := got[i].Format(time.RFC3339); g != w {
			t.Errorf("%q after %v: firing %d is %s, want %s (all: %v)", expr, from, i, g, w, got)
		}
	}
}

func TestCronNext(t *testing.T) {
	utc := time.Date(2026, 12, 7, 6, 55, 30, 0, time.UTC) // a Monday
	checkFirings(t, "*/15 * * * *", utc, "2026-12-07T07:00:00Z", "2026-12-07T07:15:00Z", "2026-12-07T07:30:00Z")
	checkFirings(t, "0 7 * * 1-5", utc, "2026-12-07T07:00:00Z", "2026-12-08T07:00:00Z", "2026-12-09T07:00:00Z", "2026-12-10T07:00:00Z", "2026-12-11T07:00:00Z", "2026-12-14T07:00:00Z")
	checkFirings(t, "0 7 * * 1-5 Europe/Rome", utc, "2026-12-08T07:00:00+01:00", "2026-12-09T07:00:00+01:00")
	checkFirings(t, "30 6 * * 0,6", utc, "2026-12-12T06:30:00Z", "2026-12-13T06:30:00Z", "2026-12-19T06:30:00Z")
	checkFirings(t, "0 0 * * 7", utc, "2026-12-13T00:00:00Z") // 7 is Sunday
	checkFirings(t, "0 9,18 1 */3 *", utc, "2027-01-01T09:00:00Z", "2027-01-01T18:00:00Z", "2027-04-01T09:00:00Z")
	checkFirings(t, "5/20 10 * * *", utc, "2026-12-07T10:05:00Z", "2026-12-07T10:25:00Z", "2026-12-07T10:45:00Z", "2026-12-08T10:05:00Z")
	checkFirings(t, "0 12 1-7 * 1-5/2", utc, "2026-12-07T12:00:00Z", "2026-12-09T12:00:00Z") // day 1-7 or Mon/Wed/Fri: OR
	checkFirings(t, "0 12 1 * *", utc, "2027-01-01T12:00:00Z")
	checkFirings(t, "0 0 29 2 *", utc, "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z")
	checkFirings(t, "0 0 31 * *", utc, "2026-12-31T00:00:00Z", "2027-01-31T00:00:00Z", "2027-03-31T00:00:00Z")
	// Strictly after: a firing at t itself is not the next.
	checkFirings(t, "0 7 * * *", time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC), "2026-12-08T07:00:00Z")
}

// Europe/Rome goes from CET (+01) to CEST (+02) at 02:00 on the last
// Sunday of March (29 March 2026) and back at 03:00 on the last Sunday of
// October (25 October 2026).
func TestCronDaylightSaving(t *testing.T) {
	rome := mustZone(t, "Europe/Rome")
	before := time.Date(2026, 3, 28, 12, 0, 0, 0, rome)

	// Daily jobs keep their wall time on both sides of the change.
	checkFirings(t, "0 7 * * * Europe/Rome", before, "2026-03-29T07:00:00+02:00", "2026-03-30T07:00:00+02:00")
	// A time the spring change skips fires once, shifted by the gap.
	checkFirings(t, "30 2 * * * Europe/Rome", before, "2026-03-29T03:30:00+02:00", "2026-03-30T02:30:00+02:00")
	// Every quarter hour across the gap: 01:45 CET, then 03:00 CEST (02:xx
	// does not exist; its times fall on 03:xx, fired once each).
	checkFirings(t, "*/15 * * * * Europe/Rome", time.Date(2026, 3, 29, 1, 40, 0, 0, rome),
		"2026-03-29T01:45:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:15:00+02:00")
	// Ranges over the gap do not fire twice.
	checkFirings(t, "0 1-4 * * * Europe/Rome", time.Date(2026, 3, 29, 0, 0, 0, 0, rome),
		"2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00", "2026-03-30T01:00:00+02:00")

	autumn := time.Date(2026, 10, 24, 12, 0, 0, 0, rome)
	checkFirings(t, "0 7 * * * Europe/Rome", autumn, "2026-10-25T07:00:00+01:00", "2026-10-26T07:00:00+01:00")
	// A repeated time with a fixed hour fires once, at its first occurrence.
	checkFirings(t, "30 2 * * * Europe/Rome", autumn, "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00")
	// ...also when asked during the repeated hour.
	checkFirings(t, "30 2 * * * Europe/Rome", time.Date(2026, 10, 25, 0, 40, 0, 0, time.UTC), // 01:40 CET, the second pass
		"2026-10-26T02:30:00+01:00")
	// With hour *, the repeated hour fires in both passes: the pace holds
	// in real time.
	checkFirings(t, "0,30 * * * * Europe/Rome", time.Date(2026, 10, 25, 1, 50, 0, 0, rome),
		"2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T02:30:00+01:00", "2026-10-25T03:00:00+01:00")
	// Weekdays are Rome's: Monday 00:30 in Rome is still Sunday in UTC.
	checkFirings(t, "30 0 * * 1 Europe/Rome", autumn, "2026-10-26T00:30:00+01:00")
}

func TestCronRefused(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{"", "0 fields"},
		{"* * * *", "4 fields"},
		{"* * * * * * *", "7 fields"},
		{"60 * * * *", "minute field \"60\": 60 is out of range (0-59)"},
		{"* 24 * * *", "hour field"},
		{"* * 0 * *", "day of month field"},
		{"* * * 13 *", "month field"},
		{"* * * * 8", "day of week field"},
		{"5-1 * * * *", "goes backwards"},
		{"*/0 * * * *", "step"},
		{"*/61 * * * *", "step"},
		{"1,,2 * * * *", "empty item"},
		{"a * * * *", "not a number"},
		{"-1 * * * *", "not a number"},
		{"+1 * * * *", "not a number"},
		{"* * * * MON", "not a number"},
		{"0 7 * * * Mars/Olympus", "time zone \"Mars/Olympus\""},
		{"0 7 * * * Local", "time zone"},
		{"0 0 30 2 *", "never fires"},
		{"0 0 31 4,6 *", "never fires"},
	} {
		_, err := parseCron(c.expr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseCron(%q) = %v; want an error saying %q", c.expr, err, c.want)
		}
	}
	// These are fine: OR of day and weekday, and February 29.
	for _, expr := range []string{"0 0 30 2 1", "0 0 29 2 *", "0 0 * * 0-7", "0 0 1-31/2 * *"} {
		if _, err := parseCron(expr); err != nil {
			t.Errorf("parseCron(%q): %v", expr, err)
		}
	}
}

// FuzzCron: whatever parses has a next firing after any time, strictly
// later, at a wall time the expression names (or the one a spring change
// shifted), with no firing in between.
func FuzzCron(f *testing.F) {
	for _, s := range []string{"0 7 * * 1-5 Europe/Rome", "*/15 * * * *", "30 2 * * * Europe/Rome", "0 0 29 2 *", "0 12 1-7 * 1-5/2", "5/20 1-4 * * * America/New_York", "59 23 31 12 *", "0 0 30 2 1 Australia/Lord_Howe"} {
		f.Add(s, int64(1774740000)) // 2026-03-28T23:20:00Z, hours before Rome's spring change
		f.Add(s, int64(1792890000)) // 2026-10-25T00:20:00Z, in Rome's autumn change
	}
	f.Fuzz(func(t *testing.T, expr string, unix int64) {
		c, err := parseCron(expr)
		if err != nil {
			return
		}
		if unix < 0 || unix > 4102444800 { // 1970 to 2100
			unix = 1774740000 + unix%(400*86400)
		}
		at := time.Unix(unix, 0)
		next, ok := c.next(at)
		if !ok {
			t.Fatalf("%q: no firing after %v", expr, at)
		}
		if !next.After(at) {
			t.Fatalf("%q: next after %v is %v, not later", expr, at, next)
		}
		if next.Second() != 0 || next.Nanosecond() != 0 {
			t.Fatalf("%q: next %v is not on a minute", expr, next)
		}
		// Nothing fires in between.
		if before := next.Add(-time.Minute); before.After(at) {
			if n2, _ := c.next(before); !n2.Equal(next) {
				t.Fatalf("%q: next after %v is %v, after %v is %v", expr, at, next, before, n2)
			}
		}
		// Its wall time is one the expression names, or its weekday and
		// day may be shifted by a spring change (then the instant an hour
		// earlier shows another offset).
		l := next.In(c.loc)
		_, off := l.Zone()
		_, offBefore := next.Add(-3 * time.Hour).In(c.loc).Zone()
		if off != offBefore {
			return // a change of offset near: the shifted time rules apply
		}
		if c.minute&(1<<l.Minute()) == 0 || c.hour&(1<<l.Hour()) == 0 || c.month&(1<<int(l.Month())) == 0 {
			t.Fatalf("%q: next %v (%v) is not a time of it", expr, next, l)
		}
		y, m, d := l.Date()
		if !c.dayMatches(time.Date(y, m, d, 0, 0, 0, 0, time.UTC)) {
			t.Fatalf("%q: next %v (%v) is not a day of it", expr, next, l)
		}
	})
}
