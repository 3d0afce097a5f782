package demoagents

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// memReminders is a grain.ReminderService in memory that fires nothing by
// itself: the test delivers ticks. (Package reminders tests Ticker on etcd.)
type memReminders struct {
	mu  sync.Mutex
	min time.Duration
	rs  map[string]grain.Reminder
}

func (m *memReminders) Register(_ context.Context, a grain.Address, r grain.Reminder) error {
	if r.Period < m.min {
		return errs.New(codes.InvalidArgument, "period %v is under the minimum %v", r.Period, m.min)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rs[a.String()+"/"+r.Name] = r
	return nil
}

func (m *memReminders) Unregister(_ context.Context, a grain.Address, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rs[a.String()+"/"+name]; !ok {
		return errs.New(codes.NotFound, "no reminder %q", name)
	}
	delete(m.rs, a.String()+"/"+name)
	return nil
}

func (m *memReminders) List(context.Context, grain.Address) ([]grain.Reminder, error) {
	return nil, nil
}

func (m *memReminders) get(key string) (grain.Reminder, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rs[key]
	return r, ok
}

func TestTicker(t *testing.T) {
	reg := grain.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	rems := &memReminders{min: time.Minute, rs: map[string]grain.Reminder{}}
	cfg := grain.DefaultConfig()
	cfg.Reminders = rems
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	const ticker = "Ticker:alice:t"
	ask := func(text string) (string, error) {
		r, err := rt.Ask(t.Context(), &grain.Message{From: "Session:alice:s1", To: ticker, Message: text})
		if err != nil {
			return "", err
		}
		return r.Message, nil
	}
	before := time.Now()
	if got, err := ask("start 90s"); err != nil || got != `reminder "tick" every 1m30s` {
		t.Fatalf("start 90s = %q, %v", got, err)
	}
	r, ok := rems.get(ticker + "/tick")
	if !ok || r.Period != 90*time.Second || r.MessageType != TickType {
		t.Fatalf("registered %+v, %v", r, ok)
	}
	for range 2 { // what the reminder service sends on a tick
		if err := rt.Send(t.Context(), &grain.Message{From: ticker, To: ticker, MessageType: r.MessageType, Message: r.Message}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := ask("count"); err != nil || got != "2" {
		t.Fatalf("count = %q, %v; want 2", got, err)
	}
	if !r.Due.After(before.Add(89 * time.Second)) {
		t.Fatalf("start 90s: first due %v, want a period after %v", r.Due, before)
	}
	// A due time of 0: the first tick is due now.
	before = time.Now()
	if got, err := ask("start 90s 0s"); err != nil || got != `reminder "tick" every 1m30s, first in 0s` {
		t.Fatalf("start 90s 0s = %q, %v", got, err)
	}
	if r, _ := rems.get(ticker + "/tick"); r.Due.Before(before) || r.Due.After(time.Now()) || r.Period != 90*time.Second {
		t.Fatalf("start 90s 0s registered %+v; want due between %v and now", r, before)
	}
	for _, bad := range []string{"start 90s -1s", "start 90s soon"} {
		if _, err := ask(bad); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("%s = %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := ask("start 10s"); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("start 10s = %v, want the service's InvalidArgument", err)
	}
	if _, err := ask("start soon"); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("start soon = %v, want InvalidArgument", err)
	}
	if got, err := ask("stop"); err != nil || got != "stopped" {
		t.Fatalf("stop = %q, %v", got, err)
	}
	if _, ok := rems.get(ticker + "/tick"); ok {
		t.Error("stop left the reminder")
	}
	if _, err := ask("stop"); errs.Code(err) != codes.NotFound {
		t.Errorf("second stop = %v, want NotFound", err)
	}
	if _, err := ask("dance"); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("dance = %v, want InvalidArgument", err)
	}
}
