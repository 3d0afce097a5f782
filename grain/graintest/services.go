package graintest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/topicname"
)

// reminderService is grain.ReminderService in memory, on the Env's clock:
// a tick is a ONE_WAY message from the agent to itself, sent when Advance
// brings it due (queued in the agent's mailbox before Advance returns).
type reminderService struct {
	env *Env

	mu  sync.Mutex
	all map[grain.Address]map[string]*reminder
}

type reminder struct {
	r     grain.Reminder
	timer clock.Timer
	ticks int
}

var _ grain.ReminderService = (*reminderService)(nil)

func (s *reminderService) Register(ctx context.Context, addr grain.Address, r grain.Reminder) error {
	if r.Name == "" {
		return errs.New(codes.InvalidArgument, "reminder of %s: no name", addr)
	}
	if r.Period < 0 {
		return errs.New(codes.InvalidArgument, "reminder %q of %s: negative period %v", r.Name, addr, r.Period)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all == nil {
		s.all = map[grain.Address]map[string]*reminder{}
	}
	rs := s.all[addr]
	if rs == nil {
		rs = map[string]*reminder{}
		s.all[addr] = rs
	}
	if old := rs[r.Name]; old != nil {
		old.timer.Stop()
	}
	rem := &reminder{r: r}
	rs[r.Name] = rem
	due := r.Due.Sub(s.env.clock.Now())
	if r.Due.IsZero() {
		due = r.Period
	}
	rem.timer = s.env.clock.AfterFunc(max(due, 0), func() { s.fire(addr, rem) })
	return nil
}

// fire sends rem's tick and sets its next one.
func (s *reminderService) fire(addr grain.Address, rem *reminder) {
	s.mu.Lock()
	if s.all[addr][rem.r.Name] != rem {
		s.mu.Unlock()
		return // replaced or removed
	}
	rem.ticks++
	if rem.r.Period > 0 {
		rem.timer.Reset(rem.r.Period)
	} else {
		delete(s.all[addr], rem.r.Name)
	}
	s.mu.Unlock()
	a := addr.String()
	err := s.env.Runtime.Send(context.Background(), &grain.Message{From: a, To: a, MessageType: rem.r.MessageType, Message: rem.r.Message})
	if err != nil {
		s.env.t.Errorf("graintest: reminder %q of %s: %v", rem.r.Name, addr, err)
	}
}

func (s *reminderService) Unregister(ctx context.Context, addr grain.Address, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rem := s.all[addr][name]
	if rem == nil {
		return errs.New(codes.NotFound, "reminder %q of %s: none", name, addr)
	}
	rem.timer.Stop()
	delete(s.all[addr], name)
	return nil
}

func (s *reminderService) List(ctx context.Context, addr grain.Address) ([]grain.Reminder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []grain.Reminder
	for _, rem := range s.all[addr] {
		out = append(out, rem.r)
	}
	slices.SortFunc(out, func(a, b grain.Reminder) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// topicService is grain.TopicService in memory: a publish is kept, and
// queued for each subscription whose pattern matches; Env.Deliver hands
// the queue to the subscribers, as the silo's topics do (a REQUEST with
// Topic and Attempt set; an error is a failed delivery, tried again up to
// the subscription's attempts, then a dead letter).
type topicService struct {
	env *Env

	mu        sync.Mutex
	seq       int
	published []Published
	subs      map[string]*subscription // by owner:name
	queue     []delivery
	dead      []Published
	batch     int // the most messages of a subscription delivered in one request
}

// Published is a message published to a topic, as the Env kept it.
type Published struct {
	ID      string
	Topic   string // owner:name
	From    string
	Message *grain.Message
}

type subscription struct {
	name        string // owner:name
	pattern     topicname.Pattern
	members     []grain.Address
	next        int
	maxAttempts int
}

type delivery struct {
	sub     *subscription
	msg     Published
	attempt uint32
}

var _ grain.TopicService = (*topicService)(nil)

// ownerOf is the owner of an agent or session address (Type:owner:alias).
func ownerOf(addr string) string {
	parts := strings.SplitN(addr, ":", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

func (s *topicService) Publish(ctx context.Context, from, topic string, msg *grain.Message) (string, error) {
	t, err := topicname.ParseTopic(topic, ownerOf(from))
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	p := Published{ID: "graintest-" + strconv.Itoa(s.seq), Topic: t.String(), From: from, Message: msg.Clone()}
	s.published = append(s.published, p)
	for _, name := range slices.Sorted(maps.Keys(s.subs)) {
		if sub := s.subs[name]; sub.pattern.Match(t) && len(sub.members) > 0 {
			s.queue = append(s.queue, delivery{sub: sub, msg: p, attempt: 1})
		}
	}
	return p.ID, nil
}

func (s *topicService) Subscribe(ctx context.Context, agent grain.Address, name, pattern string, maxAttempts int) error {
	pat, err := topicname.ParsePattern(pattern, agent.Owner)
	if err != nil {
		return err
	}
	full := agent.Owner + ":" + name
	if maxAttempts <= 0 {
		maxAttempts = 5
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.subs = map[string]*subscription{}
	}
	sub := s.subs[full]
	if sub == nil {
		sub = &subscription{name: full, pattern: pat, maxAttempts: maxAttempts}
		s.subs[full] = sub
	}
	if !slices.Contains(sub.members, agent) {
		sub.members = append(sub.members, agent)
	}
	return nil
}

func (s *topicService) Unsubscribe(ctx context.Context, agent grain.Address, name string) error {
	full := agent.Owner + ":" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.subs[full]
	if sub == nil || !slices.Contains(sub.members, agent) {
		return errs.New(codes.NotFound, "subscription %s of %s: none", full, agent)
	}
	sub.members = slices.DeleteFunc(sub.members, func(a grain.Address) bool { return a == agent })
	return nil
}

// deliver hands out the queue, and what handing it out queues, until it
// is empty or ctx ends; it returns the number of deliveries made (a batch
// is one).
func (s *topicService) deliver(ctx context.Context) (int, error) {
	n := 0
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return n, nil
		}
		d := s.queue[0]
		s.queue = s.queue[1:]
		if len(d.sub.members) == 0 {
			s.mu.Unlock()
			continue
		}
		// With batches, the deliveries of d's subscription queued after
		// it go with it, in their order, up to the batch's size.
		ds := []delivery{d}
		if s.batch > 1 {
			rest := make([]delivery, 0, len(s.queue))
			for _, q := range s.queue {
				if q.sub == d.sub && len(ds) < s.batch {
					ds = append(ds, q)
				} else {
					rest = append(rest, q)
				}
			}
			s.queue = rest
		}
		to := d.sub.members[d.sub.next%len(d.sub.members)]
		d.sub.next++
		s.mu.Unlock()
		if len(ds) > 1 {
			if err := s.deliverBatch(ctx, ds, to); err != nil {
				return n, err
			}
			n++
			continue
		}
		reply, err := s.env.Runtime.Ask(ctx, s.message(d, to))
		n++
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if err = grain.Outcome(reply, err); err != nil {
			s.mu.Lock()
			if s.failed(&d, err) {
				s.queue = append(s.queue, d)
			}
			s.mu.Unlock()
		}
	}
}

// message is the delivery of d to the agent at to.
func (s *topicService) message(d delivery, to grain.Address) *grain.Message {
	m := d.msg.Message.Clone()
	m.From, m.To, m.Topic, m.Subscription, m.Attempt = d.msg.From, to.String(), d.msg.Topic, d.sub.name, d.attempt
	return m
}

// failed counts a failed delivery of d, whose outcome was err: false if d
// is a dead letter now (poison, or its attempts are spent), true if it is
// to come again. s.mu is held.
func (s *topicService) failed(d *delivery, err error) bool {
	var out *grain.OutcomeError
	if (errors.As(err, &out) && out.Poison) || int(d.attempt) >= d.sub.maxAttempts {
		s.dead = append(s.dead, d.msg)
		return false
	}
	d.attempt++
	return true
}

// deliverBatch delivers ds, of one subscription, to the agent at to in one
// request (grain.Batch), as a silo does, and settles them by position:
// those handled are done, the first not handled has the outcome the
// handler gave it (nil: it comes again, no attempt counted), and those
// after it come again, their attempts not counted, at the head of the
// queue so that they keep their order.
func (s *topicService) deliverBatch(ctx context.Context, ds []delivery, to grain.Address) error {
	ms := make([]*grain.Message, len(ds))
	for i, d := range ds {
		ms[i] = s.message(d, to)
	}
	b, err := grain.Batch(ms)
	if err != nil {
		return err
	}
	handled, out := grain.BatchOutcome(s.env.Runtime.Ask(ctx, b))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if handled == len(ds) {
		return nil
	}
	if handled == 0 && out == nil {
		return errs.New(codes.FailedPrecondition, "graintest: %s handled none of a batch of %d and gave no error: it would get them again without end", to, len(ds))
	}
	var again []delivery
	for i := handled; i < len(ds); i++ {
		d := ds[i]
		if i == handled && out != nil {
			s.mu.Lock()
			keep := s.failed(&d, out)
			s.mu.Unlock()
			if !keep {
				continue
			}
		}
		again = append(again, d)
	}
	s.mu.Lock()
	s.queue = append(again, s.queue...)
	s.mu.Unlock()
	return nil
}

// session is the test's own client session: it keeps what agents send it
// (Env.Pushed). The runtime routes every message to a Session address
// here; one to another session is NotFound.
type session struct {
	addr string

	mu  sync.Mutex
	got []*grain.Message
}

var _ siloapi.SessionRouter = (*session)(nil)

func (s *session) DeliverToSession(ctx context.Context, w *agentsilov1.AgentMessage) error {
	msg := grain.MessageFromProto(w)
	if msg.To != s.addr {
		return errs.New(codes.NotFound, "no client session %s: the test's is %s", msg.To, s.addr)
	}
	s.mu.Lock()
	s.got = append(s.got, msg)
	s.mu.Unlock()
	return nil
}

func (s *session) messages() []*grain.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}
