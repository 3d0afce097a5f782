package topics

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/retry"
	"github.com/agentsilo/agentsilo/internal/topicstore"
	"github.com/agentsilo/agentsilo/internal/tracing"
)

// Service is one silo's part of publish/subscribe: it publishes (batching
// what many publishers write into few appends to its store), follows the
// registry of subscriptions, and delivers the subscriptions this silo owns
// (Config.Owns), one engine each (engine.go). It is the runtime's
// grain.TopicService.
//
// Its lifecycle is New (publishing and the subscription calls work), Start
// (delivery begins, once the runtime that delivers exists), Close. All
// methods are safe for concurrent use.
type Service struct {
	cfg    Config
	tracer tracing.Tracer // the publish and deliver spans (tracing.go)

	reg    atomic.Pointer[topicstore.Registry]
	regMu  sync.Mutex
	regCh  chan struct{} // closed and replaced when reg changes
	loaded chan struct{} // closed at the first registry

	pubq chan *pubReq

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the registry follower, the batcher, engines' stops

	ackMu   sync.Mutex
	acks    []topicstore.AckKey // acknowledged, not yet removed from the store
	ackWake chan struct{}       // the acker: acks to write

	mu      sync.Mutex // guards engines, deliver, closed, local, pruning
	engines map[string]*engine
	deliver Deliver
	closed  bool
	// local holds the session subscriptions made on this silo, by id:
	// this silo delivers them, into the sessions' backlogs.
	local   map[string]*localSub
	pruning map[string]bool // subscriptions without members being pruned

	endMu   sync.Mutex
	ended   []string      // sessions that ended, whose subscriptions to remove
	endWake chan struct{} // the reaper: sessions ended

	ackerDone chan struct{}

	stats struct{ published, acked, retried, failed, unavailable, dead atomic.Uint64 }
}

// localSub is a session subscription this silo delivers.
type localSub struct {
	session string
	push    Push
}

// Push delivers a message into a client session's backlog on this silo
// (the gateway's sessions): nil once it is there, NotFound if the silo
// holds no such session, ResourceExhausted if its backlog is full.
type Push func(ctx context.Context, msg *agentsilov1.AgentMessage) error

var _ grain.TopicService = (*Service)(nil)

// New checks cfg and returns a Service that follows the store's registry
// and publishes; Start begins delivery.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.store == nil {
		cfg.store = topicstore.NewMemory(cfg.clk, 0)
	}
	s := &Service{
		cfg:     cfg,
		tracer:  tracing.New(cfg.TracerProvider),
		regCh:   make(chan struct{}),
		loaded:  make(chan struct{}),
		pubq:    make(chan *pubReq, cfg.QueueSize),
		engines: make(map[string]*engine),
		ackWake: make(chan struct{}, 1),
		local:   make(map[string]*localSub),
		pruning: make(map[string]bool),
		endWake: make(chan struct{}, 1),
	}
	s.reg.Store(topicstore.NewRegistry())
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(3)
	go s.reaper()
	go func() {
		defer s.wg.Done()
		first := true
		cfg.store.FollowRegistry(s.ctx, func(r *topicstore.Registry) {
			s.setRegistry(r)
			if first {
				first = false
				close(s.loaded)
			}
		})
	}()
	go s.batcher()
	s.ackerDone = make(chan struct{})
	go s.acker()
	return s, nil
}

// ack queues the removal of an acknowledged entry.
func (s *Service) ack(sub, key string) {
	s.ackMu.Lock()
	s.acks = append(s.acks, topicstore.AckKey{Sub: sub, Key: key})
	s.ackMu.Unlock()
	poke(s.ackWake)
}

// acker removes acknowledged entries from the store: all that are waiting,
// in one Store.Ack (which splits them into transactions), whatever their
// subscription; what accumulates while it writes goes in the next. At
// Close, once the engines have stopped, it writes what is left.
func (s *Service) acker() {
	defer close(s.ackerDone)
	b := retry.New(100*time.Millisecond, 2*time.Second, nil)
	for {
		select {
		case <-s.ackWake:
		case <-s.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.flushAcks(ctx)
			cancel()
			return
		}
		if s.flushAcks(s.ctx) {
			b.Reset()
		} else if b.Wait(s.ctx, nil) {
			poke(s.ackWake)
		}
	}
}

// flushAcks writes the acks waiting; false if the store failed (they wait
// for the next flush).
func (s *Service) flushAcks(ctx context.Context) bool {
	s.ackMu.Lock()
	acks := s.acks
	s.acks = nil
	s.ackMu.Unlock()
	if len(acks) == 0 {
		return true
	}
	if err := s.cfg.store.Ack(ctx, acks); err != nil {
		s.cfg.Logger.Warn("topics: could not remove acknowledged messages; retrying", "n", len(acks), "err", err)
		s.ackMu.Lock()
		s.acks = append(acks, s.acks...)
		s.ackMu.Unlock()
		return false
	}
	return true
}

// Loaded is closed once the registry of subscriptions has been read.
func (s *Service) Loaded() <-chan struct{} { return s.loaded }

// Start begins delivering the subscriptions this silo owns through
// deliver (the runtime's Ask).
func (s *Service) Start(deliver Deliver) {
	s.mu.Lock()
	s.deliver = deliver
	s.mu.Unlock()
	s.Rebalance()
}

// deliverTo delivers through the function given to Start.
func (s *Service) deliverTo(ctx context.Context, msg *grain.Message) (*grain.Message, error) {
	s.mu.Lock()
	d := s.deliver
	s.mu.Unlock()
	return d(ctx, msg)
}

// Close stops publishing (publishes waiting fail with Unavailable) and
// delivering: the engines stop dispatching, wait for the deliveries in
// flight (bounded by ctx) and write their acknowledgments. Last, it closes
// its store (on etcd, the lease of this silo's session subscriptions is
// revoked, so that they end with it).
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	engines := s.engines
	s.engines = map[string]*engine{}
	s.mu.Unlock()
	for _, e := range engines {
		e.stop()
	}
	done := make(chan struct{})
	go func() {
		for _, e := range engines {
			e.wait()
		}
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = errs.Wrap(codes.DeadlineExceeded, ctx.Err(), "topics: close: deliveries still in flight")
		for _, e := range engines {
			e.abort()
		}
		<-done
	}
	s.cancel()
	s.wg.Wait()
	<-s.ackerDone
	if c, ok := s.cfg.store.(interface{ Close() error }); ok {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

func (s *Service) setRegistry(r *topicstore.Registry) {
	s.reg.Store(r)
	s.regMu.Lock()
	close(s.regCh)
	s.regCh = make(chan struct{})
	s.regMu.Unlock()
	s.Rebalance()
}

// registry returns the subscriptions as this silo last saw them.
func (s *Service) registry() *topicstore.Registry { return s.reg.Load() }

// waitRegistry waits until ok holds for the registry, bounded by ctx.
func (s *Service) waitRegistry(ctx context.Context, ok func(*topicstore.Registry) bool) error {
	for {
		s.regMu.Lock()
		r, ch := s.reg.Load(), s.regCh
		s.regMu.Unlock()
		if ok(r) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Rebalance starts an engine for each subscription this silo owns and
// stops the others; the silo calls it when its view changes.
func (s *Service) Rebalance() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deliver == nil || s.closed {
		return
	}
	r := s.reg.Load()
	for id, sub := range r.Subs {
		// A session's subscription is delivered by the silo of its
		// session, into the session's backlog; another by its owner in
		// the view. One without members (its session's lease ended) is
		// pruned by its owner in the view.
		own := s.cfg.Owns == nil || s.cfg.Owns(id)
		if len(sub.Members) == 0 {
			if own && !s.pruning[id] {
				s.prune(id)
			}
			own = false
		} else if sub.Session {
			own = s.local[id] != nil
		}
		e := s.engines[id]
		switch {
		case own && e == nil:
			e = newEngine(s, id, sub)
			s.engines[id] = e
			e.start()
		case own:
			e.setSub(sub)
		case e != nil:
			delete(s.engines, id)
			s.stopLater(e)
		}
	}
	for id, e := range s.engines {
		if _, ok := r.Subs[id]; !ok {
			delete(s.engines, id)
			s.stopLater(e)
		}
	}
}

// prune deletes subscription id, which has no members, in the
// background, once it has had none for Config.SessionGrace (Store.Prune
// deletes it only if it still has none). s.mu is held.
func (s *Service) prune(id string) {
	s.pruning[id] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := s.cfg.clk.NewTimer(s.cfg.SessionGrace)
		select {
		case <-t.C():
		case <-s.ctx.Done():
			t.Stop()
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		ok, err := s.cfg.store.Prune(ctx, id)
		cancel()
		if err != nil && s.ctx.Err() == nil {
			s.cfg.Logger.Warn("topics: could not delete a subscription without members", "subscription", id, "err", err)
		} else if ok {
			s.cfg.Logger.Info("topics: deleted a subscription without members (its session ended)", "subscription", id)
		}
		s.mu.Lock()
		delete(s.pruning, id)
		s.mu.Unlock()
	}()
}

// stopLater stops e in the background: its deliveries in flight finish.
func (s *Service) stopLater(e *engine) {
	e.stop()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		e.wait()
	}()
}

// Stats counts what the Service did.
type Stats struct {
	Published, Acked, Retried, Failed, Unavailable, DeadLettered uint64
	// Engines is the number of subscriptions this silo delivers.
	Engines int
}

// Stats returns the counts so far.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	n := len(s.engines)
	s.mu.Unlock()
	return Stats{
		Published:    s.stats.published.Load(),
		Acked:        s.stats.acked.Load(),
		Retried:      s.stats.retried.Load(),
		Failed:       s.stats.failed.Load(),
		Unavailable:  s.stats.unavailable.Load(),
		DeadLettered: s.stats.dead.Load(),
		Engines:      n,
	}
}
