package reminders

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/names"
)

// Service implements grain.ReminderService on etcd and fires the reminders
// of the buckets this silo owns. Its methods are safe for concurrent use.
//
// Goroutines: one scheduler (the heap and its timer), one follower of the
// views (Rebalance), one mover of the legacy layout, one loader/watcher per
// bucket held, and Config.Concurrency delivery workers; Close stops them all.
//
// Lock order: pmu and mu are never held together. Config.View is called
// with neither held.
type Service struct {
	cfg  Config
	keys keys

	pmu      sync.Mutex // guards the pending Rebalance
	pending  bool       // a Rebalance waits to be applied
	applying bool       // follow is applying one
	lostAt   time.Time  // the earliest lostAt of the pending Rebalances
	rebal    chan struct{}

	mu      sync.Mutex
	buckets [Buckets]*bucket         // the buckets held; nil: not held
	runs    map[[2]int]*run          // the runs of buckets held, by [lo, hi]
	held    int                      // buckets held
	loading int                      // buckets held and not yet loaded
	count   int                      // reminders in the buckets held
	version int64                    // the View applied last
	heap    timeHeap                 // the held reminders by next tick
	changed chan struct{}            // closed and replaced when loading or a Rebalance ends
	loads   chan struct{}            // a slot per bucket page being read
	fetches chan struct{}            // a slot per bucket being fetched (Config.Fetch)
	parted  map[int]*bucket          // buckets let go of, kept for their takers (see Export)
	timers  map[clock.Timer]struct{} // dropping the parted buckets after partedFor

	wake      chan struct{}      // pokes the scheduler when the heap's head changes
	flushes   chan chan struct{} // see flush
	jobs      chan *grain.Message
	loaded    chan struct{}
	migrated  chan struct{} // closed once the legacy layout was moved, at start
	migratedN atomic.Int64
	warned    atomic.Int64 // unix nanoseconds of the last warning (see warn)
	fired     atomic.Uint64
	fetched   atomic.Uint64
	read      atomic.Uint64
	started   chan struct{} // closed when deliver is set: firing begins
	deliver   func(ctx context.Context, msg *grain.Message) error
	start     sync.Once

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// New starts a Service. It returns at once: reminders of the legacy layout
// are moved to their buckets, then the buckets the view in force owns are
// loaded, in the background (see Loaded), while Register, Unregister and
// List work. ctx bounds nothing after New returns; Close stops the Service.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:      cfg,
		keys:     newKeys(cfg.Prefix),
		rebal:    make(chan struct{}, 1),
		changed:  make(chan struct{}),
		loads:    make(chan struct{}, 4),
		fetches:  make(chan struct{}, 16),
		wake:     make(chan struct{}, 1),
		flushes:  make(chan chan struct{}),
		jobs:     make(chan *grain.Message, 4*cfg.Concurrency),
		loaded:   make(chan struct{}),
		migrated: make(chan struct{}),
		started:  make(chan struct{}),
		stop:     make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// The first view, applied now so that Register knows which buckets
	// are held: a single silo (no Config.View) fires once at once the
	// ticks missed while it was down; a silo of a cluster takes over
	// gracefully, unless its Rebalance says otherwise.
	var lostAt time.Time
	if cfg.View != nil {
		lostAt = cfg.clk.Now()
	}
	s.apply(s.view(), lostAt, make([]bool, Buckets))
	s.wg.Add(3 + cfg.Concurrency)
	go s.schedule()
	go s.legacy()
	go s.follow()
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
		s.mu.Lock()
		for t := range s.timers {
			t.Stop()
		}
		s.timers, s.parted = nil, nil
		s.mu.Unlock()
	})
	return nil
}

// Loaded is closed once the reminders of the legacy layout present at
// start have moved to their buckets and the buckets of the first view
// applied are loaded (they fire from then on; ticks they missed fire once).
// It is never closed if the Service closes first.
func (s *Service) Loaded() <-chan struct{} { return s.loaded }

// Stats is a snapshot of a Service's state.
type Stats struct {
	// Reminders in the buckets this silo holds (and only those).
	Reminders int
	// Scheduled: the reminders in the heap, to fire here.
	Scheduled int
	// Buckets held: owned in the newest view applied.
	Buckets int
	// Loading: buckets held and not yet loaded.
	Loading int
	// View is the version of the newest view applied.
	View int64
	// Fired counts the ticks handed to Deliver since New.
	Fired uint64
	// Migrated counts the reminders this Service moved from the legacy
	// layout to their buckets.
	Migrated int64
	// Fetched counts the buckets taken over from the silo that held them
	// before (Config.Fetch), not read from etcd.
	Fetched uint64
	// Read counts the buckets taken over (loaded for the first time since
	// they were gained) by reading them from etcd.
	Read uint64
}

// Stats returns a snapshot.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Reminders: s.count, Scheduled: len(s.heap), Buckets: s.held, Loading: s.loading,
		View: s.version, Fired: s.fired.Load(), Migrated: s.migratedN.Load(), Fetched: s.fetched.Load(), Read: s.read.Load()}
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
	head := false
	s.mu.Lock()
	if bk := s.buckets[Bucket(addr)]; bk != nil {
		now := s.cfg.clk.Now()
		head = s.putLocked(bk, key, addr, r, resp.Header.Revision, now, now, true)
	}
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
	if !names.Valid(name) {
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
	if bk := s.buckets[Bucket(addr)]; bk != nil {
		s.deleteLocked(bk, key, resp.Header.Revision, true)
	}
	s.mu.Unlock()
	if resp.Deleted == 0 {
		// Not moved from the legacy layout yet?
		resp, err := s.cfg.Client.Delete(octx, s.keys.legacyAgent(addr)+name)
		if err != nil {
			return etcderr.FromCall(ctx, err, "unregister reminder %q of %s", name, addr)
		}
		if resp.Deleted == 0 {
			return errs.New(codes.NotFound, "%s has no reminder %q", addr, name)
		}
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
	// Both layouts in one request: a reminder of the legacy layout not
	// moved yet is listed too.
	p, lp := s.keys.agent(addr), s.keys.legacyAgent(addr)
	resp, err := s.cfg.Client.Txn(octx).Then(clientv3.OpGet(p, prefixOpt(p)...), clientv3.OpGet(lp, prefixOpt(lp)...)).Commit()
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "list reminders of %s", addr)
	}
	var out []grain.Reminder
	for _, rr := range resp.Responses {
		for _, kv := range rr.GetResponseRange().Kvs {
			k := string(kv.Key)
			name := k[strings.LastIndexByte(k, '/')+1:]
			if slices.ContainsFunc(out, func(r grain.Reminder) bool { return r.Name == name }) {
				continue // the bucket's wins
			}
			r, err := decode(name, kv.Value)
			if err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable reminder", "key", k, "err", err)
				continue
			}
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b grain.Reminder) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *Service) validAddr(addr grain.Address) error {
	if !names.ValidType(addr.Type) || !names.Valid(addr.Owner) || !names.Valid(addr.Alias) {
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
	if !names.Valid(r.Name) {
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
		r.Due = s.cfg.clk.Now().Add(r.Period)
	}
	r.Due = time.UnixMilli(r.Due.UnixMilli()) // stored in ms
	return s.open()
}

func (s *Service) open() error {
	if s.ctx.Err() != nil {
		return errClosed()
	}
	return nil
}

func errClosed() error { return errs.New(codes.Unavailable, "the reminder service is closed") }

// op bounds one etcd request by OpTimeout, so that a lost etcd is answered
// with Unavailable instead of a hang.
func (s *Service) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.OpTimeout)
}

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
