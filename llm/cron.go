package llm

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A cron expression of a schedule entry: five fields, minute hour
// day-of-month month day-of-week, then optionally an IANA time zone (UTC
// if none):
//
//	0 7 * * 1-5 Europe/Rome     07:00 on weekdays, Rome time
//	*/15 * * * *                every quarter of an hour, UTC
//	0 9,18 1 */3 *              09:00 and 18:00 on the 1st of every third month
//
// Each field is a comma-separated list of `*`, `N`, `N-M`, each with an
// optional `/STEP` (`N/STEP` is N to the field's maximum); numbers only
// (minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-7, 0 and 7
// both Sunday). A day matches if its day of month and its weekday both
// match; when neither of those two fields starts with `*`, either
// matching is enough (as in Vixie cron: "0 0 1 * 1" is the 1st and every
// Monday).
//
// Times are wall-clock times of the zone. Across daylight saving changes:
// a time the spring change skips (02:30 in Europe/Rome on its last
// Sunday of March) fires once, shifted by the gap (03:30 CEST); a time the
// autumn change repeats (02:30 on the last Sunday of October) fires once,
// at its first occurrence, unless the hour field is `*`, in which case it
// fires at both (every minute or quarter of an hour then keeps its pace
// in real time).

// cronSpec is a parsed cron expression.
type cronSpec struct {
	minute, hour, dom, month, dow uint64 // bit i: value i matches
	domStar, dowStar, hourAll     bool
	loc                           *time.Location
}

// cronField is the range of one field.
type cronField struct {
	name     string
	min, max int
}

var cronFields = [5]cronField{
	{"minute", 0, 59},
	{"hour", 0, 23},
	{"day of month", 1, 31},
	{"month", 1, 12},
	{"day of week", 0, 7},
}

// parseCron parses a cron expression with an optional trailing time zone.
func parseCron(expr string) (*cronSpec, error) {
	f := strings.Fields(expr)
	if len(f) != 5 && len(f) != 6 {
		return nil, fmt.Errorf("%q has %d fields; want 5 (minute hour day-of-month month day-of-week) and optionally a time zone (e.g. \"0 7 * * 1-5 Europe/Rome\")", clipText(expr, 80), len(f))
	}
	c := &cronSpec{loc: time.UTC}
	if len(f) == 6 {
		// A Local zone would make the schedule depend on the silo's
		// machine: only names of the IANA database (and UTC).
		if f[5] == "Local" || f[5] == "" {
			return nil, fmt.Errorf("time zone %q: want an IANA name such as Europe/Rome, or UTC", clipText(f[5], 40))
		}
		loc, err := time.LoadLocation(f[5])
		if err != nil {
			return nil, fmt.Errorf("time zone %q: not a zone of the IANA database (such as Europe/Rome, or UTC)", clipText(f[5], 40))
		}
		c.loc = loc
	}
	sets := [5]*uint64{&c.minute, &c.hour, &c.dom, &c.month, &c.dow}
	for i, field := range cronFields {
		v, err := parseCronField(f[i], field)
		if err != nil {
			return nil, err
		}
		*sets[i] = v
	}
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1 // 7 is Sunday, as 0
	}
	c.domStar = strings.HasPrefix(f[2], "*")
	c.dowStar = strings.HasPrefix(f[4], "*")
	c.hourAll = c.hour == 1<<24-1
	if c.dowStar && !c.domStar {
		// A day of month that no month of the expression has never fires.
		ok := false
		for m := 1; m <= 12 && !ok; m++ {
			if c.month&(1<<m) != 0 && c.dom&(1<<(daysIn(m)+1)-1) != 0 {
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("%q never fires: no month of it has such a day", clipText(expr, 80))
		}
	}
	return c, nil
}

// daysIn is the most days month m has (29 for February).
func daysIn(m int) int {
	switch m {
	case 2:
		return 29
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// parseCronField parses one field into a set of values.
func parseCronField(s string, f cronField) (uint64, error) {
	bad := func(format string, args ...any) (uint64, error) {
		return 0, fmt.Errorf("%s field %q: %s", f.name, clipText(s, 40), fmt.Sprintf(format, args...))
	}
	var set uint64
	for item := range strings.SplitSeq(s, ",") {
		rng, step, hasStep := strings.Cut(item, "/")
		lo, hi := f.min, f.max
		switch {
		case rng == "*":
		case rng == "":
			return bad("an empty item")
		default:
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = cronNumber(a, f); err != nil {
				return bad("%v", err)
			}
			hi = lo
			if isRange {
				if hi, err = cronNumber(b, f); err != nil {
					return bad("%v", err)
				}
				if hi < lo {
					return bad("the range %d-%d goes backwards", lo, hi)
				}
			} else if hasStep {
				hi = f.max // N/STEP: from N to the maximum
			}
		}
		n := 1
		if hasStep {
			var err error
			n, err = strconv.Atoi(step)
			if err != nil || n < 1 || n > f.max-f.min+1 {
				return bad("step %q: want a number from 1 to %d", clipText(step, 10), f.max-f.min+1)
			}
		}
		for v := lo; v <= hi; v += n {
			set |= 1 << v
		}
	}
	return set, nil
}

func cronNumber(s string, f cronField) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || len(s) > 2 || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("%q is not a number", clipText(s, 10))
	}
	if n < f.min || n > f.max {
		return 0, fmt.Errorf("%d is out of range (%d-%d)", n, f.min, f.max)
	}
	return n, nil
}

// maxCronDays bounds the search for the next firing: any expression that
// parses fires within it (February 29 with a weekday of its own may wait
// eight years: 2096, then 2104).
const maxCronDays = 9 * 366

// next returns the first firing strictly after t, and false if there is
// none within maxCronDays (parseCron refuses the expressions that never
// fire, so only at the end of time).
func (c *cronSpec) next(t time.Time) (time.Time, bool) {
	local := t.In(c.loc)
	y, mo, d := local.Date()
	day := time.Date(y, mo, d, 0, 0, 0, 0, time.UTC) // the civil date
	for i := 0; i < maxCronDays; i, day = i+1, day.AddDate(0, 0, 1) {
		if !c.dayMatches(day) {
			continue
		}
		var best time.Time
		found := false
		for h := range 24 {
			if c.hour&(1<<h) == 0 || (i == 0 && h < local.Hour()-2) {
				continue
			}
			for m := range 60 {
				if c.minute&(1<<m) == 0 {
					continue
				}
				first, second, two := c.instants(day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute))
				for _, x := range []time.Time{first, second} {
					if x.After(t) && (!found || x.Before(best)) {
						best, found = x, true
					}
					if !two || !c.hourAll {
						break // a repeated time fires at its first occurrence only
					}
				}
			}
		}
		if found {
			return best.In(c.loc), true
		}
	}
	return time.Time{}, false
}

// dayMatches reports whether the civil date day (in UTC) is a day of c.
func (c *cronSpec) dayMatches(day time.Time) bool {
	if c.month&(1<<int(day.Month())) == 0 {
		return false
	}
	dom := c.dom&(1<<day.Day()) != 0
	dow := c.dow&(1<<int(day.Weekday())) != 0
	switch {
	case c.domStar || c.dowStar:
		return dom && dow
	default:
		return dom || dow
	}
}

// instants returns the instants whose wall time in c's zone is wall (a
// civil time written in UTC): one, or two (earliest first) when a
// daylight saving change repeats it. A wall time the change skips gives
// the instant that the offset before the change makes of it, which shows
// as wall time shifted by the gap.
func (c *cronSpec) instants(wall time.Time) (first, second time.Time, two bool) {
	_, before := wall.Add(-24 * time.Hour).In(c.loc).Zone()
	_, after := wall.Add(24 * time.Hour).In(c.loc).Zone()
	x1 := wall.Add(-time.Duration(before) * time.Second)
	x2 := wall.Add(-time.Duration(after) * time.Second)
	ok1, ok2 := sameWall(x1, wall, c.loc), sameWall(x2, wall, c.loc)
	switch {
	case ok1 && ok2 && !x1.Equal(x2):
		if x2.Before(x1) {
			x1, x2 = x2, x1
		}
		return x1, x2, true
	case ok2 && !ok1:
		return x2, time.Time{}, false
	}
	return x1, time.Time{}, false
}

// sameWall reports whether x shows wall (a civil time in UTC) in loc.
func sameWall(x, wall time.Time, loc *time.Location) bool {
	y, mo, d := x.In(loc).Date()
	h, m, s := x.In(loc).Clock()
	return time.Date(y, mo, d, h, m, s, 0, time.UTC).Equal(wall)
}
