package reminders

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// Service implements grain.ReminderService on etcd and fires the reminders of
// the agents this silo owns. Its methods are safe for concurrent use.
//
// Goroutines: one scheduler (the heap and its timer), one loader/watcher, and
// Config.Concurrency delivery workers; Close stops them all.
//
// Lock order: Service.mu is the only lock; Config.Owns is called with it held
// and must not call back into the Service.
type Service struct {
	cfg  Config
	keys keys

	mu      sync.Mutex
	entries map[string]*entry // by etcd key: every reminder known, owned or not
	tombs   map[string]int64  // key -> revision of a local delete not yet seen by the watch
	heap    timeHeap          // owned reminders by next tick

	wake    chan struct{}      // pokes the scheduler when the heap's head changes
	flushes chan chan struct{} // see flush
	jobs    chan *grain.Message
	loaded  chan struct{}
	fired   atomic.Uint64
	started chan struct{} // closed when deliver is set: firing begins
	deliver func(ctx context.Context, msg *grain.Message) error
	start   sync.Once

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// New starts a Service. It returns at once: the reminders already in etcd are
// loaded in the background (see Loaded) while Register, Unregister and List
// work. ctx bounds nothing after New returns; Close stops the Service.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:     cfg,
		keys:    keys{root: cfg.Prefix + "reminders/"},
		entries: make(map[string]*entry),
		tombs:   make(map[string]int64),
		wake:    make(chan struct{}, 1),
		flushes: make(chan chan struct{}),
		jobs:    make(chan *grain.Message, 4*cfg.Concurrency),
		loaded:  make(chan struct{}),
		started: make(chan struct{}),
		stop:    make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(2 + cfg.Concurrency)
	go s.schedule()
	go s.sync()
	for range cfg.Concurrency {
		go s.work()
	}
	if cfg.Deliver != nil {
		s.Start(cfg.Deliver)
	}
	return s, nil
}

// Start begins firing, through deliver, if Config.Deliver was nil; until
// then Register, Unregister and List work and the reminders load, but
// nothing fires (ticks that come due meanwhile fire once when it starts).
// Later calls do nothing.
func (s *Service) Start(deliver func(ctx context.Context, msg *grain.Message) error) {
	if deliver == nil {
		return
	}
	s.start.Do(func() {
		s.deliver = deliver
		close(s.started)
	})
}

// Close stops the Service's goroutines and cancels deliveries in flight. The
// etcd client stays open. Close may be called more than once.
func (s *Service) Close() error {
	s.once.Do(func() {
		s.cancel()
		close(s.stop)
		s.wg.Wait()
	})
	return nil
}

// Loaded is closed once the reminders stored in etcd when the Service started
// have been read (they fire from then on; ticks they missed fire once). It is
// never closed if the Service closes first.
func (s *Service) Loaded() <-chan struct{} { return s.loaded }

// Stats is a snapshot of a Service's state.
type Stats struct {
	// Reminders known to this silo, owned or not.
	Reminders int
	// Scheduled: the reminders this silo owns and fires.
	Scheduled int
	// Fired counts the ticks handed to Deliver since New.
	Fired uint64
}

// Stats returns a snapshot.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Reminders: len(s.entries), Scheduled: len(s.heap), Fired: s.fired.Load()}
}

// Rebalance re-evaluates Config.Owns for every reminder after the cluster
// view changed: reminders of agents that moved away stop firing here, and
// those of agents that moved here start. A reminder taken over fires once at
// once if one of its ticks fell after lostAt (when the old owner may have
// stopped firing: its failure, or for a graceful hand-over the time of the
// hand-over, so nothing fires twice), then on schedule.
func (s *Service) Rebalance(lostAt time.Time) {
	s.mu.Lock()
	now := s.cfg.Clock.Now()
	for _, e := range s.entries {
		owned := s.owns(e.addr)
		switch {
		case owned && e.idx < 0:
			s.scheduleLocked(e, now, lostAt)
		case !owned && e.idx >= 0:
			s.heap.remove(e)
		}
	}
	s.mu.Unlock()
	s.poke()
}

// Register implements grain.ReminderService: it creates or replaces the
// reminder r.Name of addr, first due at r.Due (one period from now if zero),
// then every period. A first tick that is due already (r.Due is now, or in
// the last period) fires at once; etcd is written here and by Unregister
// only, never per tick.
// Errors: InvalidArgument (bad address or name, period under MinPeriod),
// ResourceExhausted (payload over MaxPayload), NotFound (unknown agent type),
// Unavailable (etcd unreachable).
func (s *Service) Register(ctx context.Context, addr grain.Address, r grain.Reminder) error {
	if err := s.validate(addr, &r); err != nil {
		return err
	}
	val, err := encode(r)
	if err != nil {
		return errs.Wrap(codes.Internal, err, "reminder %q", r.Name)
	}
	key := s.keys.of(addr, r.Name)
	octx, cancel := s.op(ctx)
	defer cancel()
	resp, err := s.cfg.Client.Put(octx, key, string(val))
	if err != nil {
		return etcderr.FromCall(ctx, err, "register reminder %q of %s", r.Name, addr)
	}
	s.mu.Lock()
	now := s.cfg.Clock.Now()
	head := s.putLocked(key, addr, r, resp.Header.Revision, now, now)
	s.mu.Unlock()
	if head {
		s.poke()
	}
	return nil
}

// Unregister implements grain.ReminderService. NotFound if addr has no
// reminder of that name.
func (s *Service) Unregister(ctx context.Context, addr grain.Address, name string) error {
	if err := s.validAddr(addr); err != nil {
		return err
	}
	if !grain.ValidName(name) {
		return badName(name)
	}
	if err := s.open(); err != nil {
		return err
	}
	key := s.keys.of(addr, name)
	octx, cancel := s.op(ctx)
	defer cancel()
	resp, err := s.cfg.Client.Delete(octx, key)
	if err != nil {
		return etcderr.FromCall(ctx, err, "unregister reminder %q of %s", name, addr)
	}
	s.mu.Lock()
	s.deleteLocked(key, resp.Header.Revision, true)
	s.mu.Unlock()
	if resp.Deleted == 0 {
		return errs.New(codes.NotFound, "%s has no reminder %q", addr, name)
	}
	return nil
}

// List implements grain.ReminderService: addr's reminders, by name, as stored
// in etcd (it works while the Service is still loading).
func (s *Service) List(ctx context.Context, addr grain.Address) ([]grain.Reminder, error) {
	if err := s.validAddr(addr); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	octx, cancel := s.op(ctx)
	defer cancel()
	resp, err := s.cfg.Client.Get(octx, s.keys.agent(addr), prefixOpt(s.keys.agent(addr))...)
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "list reminders of %s", addr)
	}
	out := make([]grain.Reminder, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		_, name, err := s.keys.parse(string(kv.Key))
		if err != nil {
			continue
		}
		r, err := decode(name, kv.Value)
		if err != nil {
			s.cfg.Logger.Warn("reminders: skipping unreadable reminder", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Service) validAddr(addr grain.Address) error {
	if !grain.ValidType(addr.Type) || !grain.ValidName(addr.Owner) || !grain.ValidName(addr.Alias) {
		return errs.New(codes.InvalidArgument, "reminder of %q: bad agent address, want Type:owner:alias", addr.String())
	}
	return nil
}

func badName(name string) error {
	if len(name) > 80 {
		name = name[:80] + "..."
	}
	return errs.New(codes.InvalidArgument, "reminder name %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", name)
}

func (s *Service) validate(addr grain.Address, r *grain.Reminder) error {
	if err := s.validAddr(addr); err != nil {
		return err
	}
	if !grain.ValidName(r.Name) {
		return badName(r.Name)
	}
	if s.cfg.Known != nil && !s.cfg.Known(addr.Type) {
		return errs.New(codes.NotFound, "reminder %q of %s: agent type %q is not registered", r.Name, addr, addr.Type)
	}
	r.Period = r.Period.Truncate(time.Millisecond) // stored in ms
	if r.Period < s.cfg.MinPeriod || r.Period <= 0 {
		return errs.New(codes.InvalidArgument, "reminder %q: period %v is under the minimum %v (--min-reminder-period)", r.Name, r.Period, max(s.cfg.MinPeriod, time.Millisecond))
	}
	if n := len(r.MessageType) + len(r.Message); n > s.cfg.MaxPayload {
		return errs.New(codes.ResourceExhausted, "reminder %q: payload of %d bytes (message type and message) is over the limit of %d", r.Name, n, s.cfg.MaxPayload)
	}
	if grain.IsReserved(r.MessageType) {
		return errs.New(codes.InvalidArgument, "reminder %q: message type %q is reserved", r.Name, r.MessageType)
	}
	if r.Due.IsZero() {
		r.Due = s.cfg.Clock.Now().Add(r.Period)
	}
	r.Due = time.UnixMilli(r.Due.UnixMilli()) // stored in ms
	return s.open()
}

func (s *Service) open() error {
	if s.ctx.Err() != nil {
		return errs.New(codes.Unavailable, "the reminder service is closed")
	}
	return nil
}

// op bounds one etcd request by OpTimeout, so that a lost etcd is answered
// with Unavailable instead of a hang.
func (s *Service) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.OpTimeout)
}

func (s *Service) owns(addr grain.Address) bool {
	return s.cfg.Owns == nil || s.cfg.Owns(addr)
}

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
