package llm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// Schedules. Each entry of a definition's schedule is one durable
// reminder of its agent, Type:owner:alias, named ScheduleType + "." + a
// hash of the entry's times and message (so a changed entry is another
// reminder, and the same entry keeps its own). Reminders know only a due
// time and a period: the reminder is due at the entry's next firing, and
// its tick's text (a scheduleTick) says which firing it is for. At each
// tick the agent registers the reminder again, due at the firing after,
// and then starts a turn with the entry's message (on behalf of its
// owner, as every reminder tick is), unless its record shows a turn
// started for that firing already (a reminder delivers at least once).
// The reminder's period is the entry's (every) or ScheduleRetryPeriod
// (cron): if registering the next firing failed, the tick comes again
// then, and a firing missed in between runs once.
//
// Who registers the reminders: package cluster, for a declared type, when
// the definition is applied (and removes them when it is replaced without
// them or deleted); ScheduleReminders lists them for a program of one's
// own.

const (
	// ScheduleType is the message type of a schedule's reminder ticks and
	// the first part of its reminders' names.
	ScheduleType = "llm.schedule"
	// DefaultScheduleAlias is the alias of the agent a schedule entry
	// without one asks.
	DefaultScheduleAlias = "scheduled"
	// ScheduleRetryPeriod is the period of a cron entry's reminder: it
	// fires again after this if the agent could not register the next
	// firing at a tick.
	ScheduleRetryPeriod = time.Hour
)

// scheduleTick is the text of a schedule reminder's ticks, as JSON: the
// entry, and the firing the tick is for.
type scheduleTick struct {
	Every   Duration  `json:"every,omitempty"`
	Cron    string    `json:"cron,omitempty"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

func (s ScheduleEntry) alias() string {
	if s.Alias == "" {
		return DefaultScheduleAlias
	}
	return s.Alias
}

// reminderName names the entry's reminder: ScheduleType, then a hash of
// its times and message.
func (s ScheduleEntry) reminderName() string {
	h := sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%s", s.Every, s.Cron, s.Message))
	return ScheduleType + "." + hex.EncodeToString(h[:8])
}

// times is when an entry fires.
type times interface {
	// next is the first firing strictly after t.
	next(t time.Time) (time.Time, bool)
}

type everyTimes time.Duration

func (e everyTimes) next(t time.Time) (time.Time, bool) { return t.Add(time.Duration(e)), true }

func (s ScheduleEntry) times() (times, error) {
	if s.Cron != "" {
		c, err := parseCron(s.Cron)
		if err != nil {
			return nil, errs.Wrap(codes.InvalidArgument, err, "cron")
		}
		return c, nil
	}
	if s.Every < Duration(time.Minute) {
		return nil, errs.New(codes.InvalidArgument, "every: %v is under a minute", time.Duration(s.Every))
	}
	return everyTimes(s.Every), nil
}

// following returns the first firing after now of the entry whose firing
// at came: for every, at plus whole periods (the pace holds); for cron,
// the expression's next time after now.
func following(w times, at, now time.Time) (time.Time, bool) {
	if e, ok := w.(everyTimes); ok {
		if !now.Before(at) {
			k := now.Sub(at)/time.Duration(e) + 1
			return at.Add(time.Duration(k) * time.Duration(e)), true
		}
		return at.Add(time.Duration(e)), true
	}
	return w.next(now)
}

// latest returns the last firing in (after, upTo], if any (bounded: a
// cron of every minute missed for days is looked through for a week's
// firings at most, then the last of those is run).
func latest(w times, after, upTo time.Time) (time.Time, bool) {
	if e, ok := w.(everyTimes); ok {
		if upTo.Sub(after) < time.Duration(e) {
			return time.Time{}, false
		}
		k := upTo.Sub(after) / time.Duration(e)
		return after.Add(time.Duration(k) * time.Duration(e)), true
	}
	var last time.Time
	found := false
	t := after
	if upTo.Sub(after) > 7*24*time.Hour {
		t = upTo.Add(-7 * 24 * time.Hour)
	}
	for range 7 * 24 * 60 {
		n, ok := w.next(t)
		if !ok || n.After(upTo) {
			break
		}
		last, found, t = n, true, n
	}
	return last, found
}

// reminder is the entry's reminder, due at its firing at.
func (s ScheduleEntry) reminder(at time.Time) (grain.Reminder, error) {
	text, err := json.Marshal(scheduleTick{Every: s.Every, Cron: s.Cron, Message: s.Message, At: at.UTC()})
	if err != nil {
		return grain.Reminder{}, errs.Wrap(codes.Internal, err, "encode a schedule's tick")
	}
	period := time.Duration(s.Every)
	if s.Cron != "" {
		period = ScheduleRetryPeriod
	}
	return grain.Reminder{Name: s.reminderName(), Period: period, MessageType: ScheduleType, Message: string(text), Due: at}, nil
}

// ScheduledReminder is the reminder of one schedule entry, for its agent.
type ScheduledReminder struct {
	// Agent is the agent asked: Type:owner:alias.
	Agent grain.Address
	// Reminder is due at the entry's first firing after the time given to
	// ScheduleReminders.
	Reminder grain.Reminder
}

// ScheduleReminders returns the reminders that run def's schedule, one per
// entry, each due at the entry's first firing after now: registered (with
// the reminder service of the cluster, as package cluster does for a
// declared type) they make the agents of def's type ask themselves the
// entries' messages at their times. An entry without an owner gets
// defaultOwner ("" makes such an entry InvalidArgument).
func ScheduleReminders(def Definition, defaultOwner string, now time.Time) ([]ScheduledReminder, error) {
	out := make([]ScheduledReminder, 0, len(def.Schedule))
	for i, e := range def.Schedule {
		owner := e.Owner
		if owner == "" {
			owner = defaultOwner
		}
		addr := grain.Address{Type: def.Type, Owner: owner, Alias: e.alias()}
		if !grain.ValidName(owner) {
			return nil, errs.New(codes.InvalidArgument, "definition %s: schedule[%d].owner: missing or not an owner", def.Type, i)
		}
		w, err := e.times()
		if err != nil {
			return nil, errs.Wrap(codes.InvalidArgument, err, "definition %s: schedule[%d]", def.Type, i)
		}
		first, ok := w.next(now)
		if !ok {
			return nil, errs.New(codes.InvalidArgument, "definition %s: schedule[%d].cron: no firing after %v", def.Type, i, now)
		}
		r, err := e.reminder(first)
		if err != nil {
			return nil, err
		}
		out = append(out, ScheduledReminder{Agent: addr, Reminder: r})
	}
	return out, nil
}

// scheduled handles a tick of a schedule reminder: it registers the
// reminder's next firing, then starts a turn with the entry's message
// unless one started for this firing already. Failures are logged; the
// next firing tries again.
func (a *agent) scheduled(ctx context.Context, m *grain.Message) {
	log := a.h.Logger()
	var tk scheduleTick
	if err := json.Unmarshal([]byte(m.Message), &tk); err != nil {
		log.Error("a schedule reminder's tick does not decode: no turn", "err", err)
		return
	}
	e := ScheduleEntry{Every: tk.Every, Cron: tk.Cron, Message: tk.Message}
	name := e.reminderName()
	w, err := e.times()
	if err != nil {
		log.Error("a schedule reminder's tick names no times; it is removed", "reminder", name, "err", err)
		if err := a.h.UnregisterReminder(ctx, name); err != nil {
			log.Warn("remove the schedule reminder", "reminder", name, "err", err)
		}
		return
	}
	now := a.t.opts.clk.Now()
	// The next firing first: a turn that fails does not stop the schedule.
	from := now
	if tk.At.After(now) {
		from = tk.At // a tick early by the silos' clocks' difference
	}
	if next, ok := following(w, tk.At, from); ok {
		r, err := e.reminder(next)
		if err == nil {
			err = a.h.RegisterReminder(ctx, name, max(next.Sub(now), 0), r.Period, ScheduleType, r.Message)
		}
		if err != nil {
			log.Warn("the schedule's next firing is not registered; its reminder ticks again after its period", "reminder", name, "next", next, "period", r.Period, "err", err)
		}
	}
	if a.stale {
		if err := a.load(ctx); err != nil {
			log.Warn("schedule: load the conversation; the next firing tries again", "reminder", name, "err", err)
			return
		}
	}
	a.mu.Lock()
	last, ran := a.rec.Scheduled[name]
	a.mu.Unlock()
	at := tk.At
	if ran && !at.After(last) {
		// A tick again for a firing that ran (or the retry period's tick):
		// a firing missed since runs once.
		var ok bool
		if at, ok = latest(w, last, now); !ok {
			return
		}
	}
	if !a.enter() {
		return
	}
	defer a.leave()
	s := turnStart{text: e.Message, from: m.From, principal: principalOf(m), trigger: TriggerSchedule, schedule: name, at: at}
	if _, err := a.begin(ctx, s); err != nil {
		log.Warn("the scheduled turn did not start; the next firing tries again", "reminder", name, "firing", at, "err", err)
		return
	}
	ans, err := a.run(ctx, runContext{})
	switch {
	case err != nil:
		log.Warn("the scheduled turn did not end; its resume reminder will try again", "reminder", name, "firing", at, "err", err)
	case len(ans.pending) > 0:
		log.Info("the scheduled turn waits for approvals", "reminder", name, "firing", at, "approvals", describe(ans.pending))
	case ans.Code != codes.OK:
		log.Warn("the scheduled turn ended without an answer", "reminder", name, "firing", at, "code", ans.Code, "err", ans.Error)
	default:
		log.Debug("scheduled turn answered", "reminder", name, "firing", at)
	}
}
