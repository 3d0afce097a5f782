package topics

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/retry"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Service is one silo's part of publish/subscribe: it publishes (batching
// what many publishers write into few Store appends), follows the
// registry of subscriptions, and delivers the subscriptions this silo owns
// (Config.Owns), one engine each (engine.go). It is the runtime's
// grain.TopicService.
//
// Its lifecycle is New (publishing and the subscription calls work), Start
// (delivery begins, once the runtime that delivers exists), Close. All
// methods are safe for concurrent use.
type Service struct {
	cfg Config

	reg    atomic.Pointer[Registry]
	regMu  sync.Mutex
	regCh  chan struct{} // closed and replaced when reg changes
	loaded chan struct{} // closed at the first registry

	pubq chan *pubReq

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the registry follower, the batcher, engines' stops

	ackMu   sync.Mutex
	acks    []AckKey      // acknowledged, not yet removed from the store
	ackWake chan struct{} // the acker: acks to write

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
type Push func(ctx context.Context, msg *grain.Message) error

// pubReq is one publish waiting for the batcher.
type pubReq struct {
	topic Topic
	entry *Entry
	idem  string
	done  chan pubResult // buffered
}

type pubResult struct {
	id   string
	subs int
	dup  bool
	err  error
}

var _ grain.TopicService = (*Service)(nil)

// New checks cfg and returns a Service that follows the store's registry
// and publishes; Start begins delivery.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:     cfg,
		regCh:   make(chan struct{}),
		loaded:  make(chan struct{}),
		pubq:    make(chan *pubReq, cfg.QueueSize),
		engines: make(map[string]*engine),
		ackWake: make(chan struct{}, 1),
		local:   make(map[string]*localSub),
		pruning: make(map[string]bool),
		endWake: make(chan struct{}, 1),
	}
	s.reg.Store(NewRegistry(nil, nil, nil, nil))
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(3)
	go s.reaper()
	go func() {
		defer s.wg.Done()
		first := true
		cfg.Store.FollowRegistry(s.ctx, func(r *Registry) {
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
	s.acks = append(s.acks, AckKey{Sub: sub, Key: key})
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
	if err := s.cfg.Store.Ack(ctx, acks); err != nil {
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
// the Store if it has a Close method (EtcdStore: the sessions' lease is
// revoked, so that this silo's session subscriptions end with it).
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
	if c, ok := s.cfg.Store.(interface{ Close() error }); ok {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

func (s *Service) setRegistry(r *Registry) {
	s.reg.Store(r)
	s.regMu.Lock()
	close(s.regCh)
	s.regCh = make(chan struct{})
	s.regMu.Unlock()
	s.Rebalance()
}

// Registry returns the subscriptions as this silo last saw them.
func (s *Service) Registry() *Registry { return s.reg.Load() }

// waitRegistry waits until ok holds for the registry, bounded by ctx.
func (s *Service) waitRegistry(ctx context.Context, ok func(*Registry) bool) error {
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
		t := s.cfg.Clock.NewTimer(s.cfg.SessionGrace)
		select {
		case <-t.C():
		case <-s.ctx.Done():
			t.Stop()
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		ok, err := s.cfg.Store.Prune(ctx, id)
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

// ownerOf returns the owner of a sender's address (an agent or a session).
func ownerOf(from string) (string, error) {
	a, err := grain.ParseAddress(from)
	if err != nil {
		return "", errs.New(codes.InvalidArgument, "publisher %q: %v", clip(from), err)
	}
	return a.Owner, nil
}

// MaxIdemKey is the longest idempotency key.
const MaxIdemKey = 128

func checkIdemKey(k string) error {
	if len(k) > MaxIdemKey {
		return errs.New(codes.InvalidArgument, "idempotency key of %d bytes exceeds %d", len(k), MaxIdemKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] > '~' || k[i] == '/' {
			return errs.New(codes.InvalidArgument, "idempotency key %q: want printable ASCII without spaces or /", clip(k))
		}
	}
	return nil
}

// PublishResult is what Publish did.
type PublishResult struct {
	// ID is the message's id (the first's, for a duplicate).
	ID string
	// Subscriptions counts the subscriptions it was queued for.
	Subscriptions int
	// Duplicate: its idempotency key was published already within the
	// window; nothing was queued again.
	Duplicate bool
}

// Publish implements grain.TopicService.
func (s *Service) Publish(ctx context.Context, from, topic string, msg *grain.Message) (string, error) {
	r, err := s.PublishMessage(ctx, from, topic, msg)
	return r.ID, err
}

// PublishMessage publishes msg to topic on behalf of from (an agent or a
// session, whose owner a relative topic belongs to) and returns once it is
// durable. A matching subscription whose backlog is full makes it wait
// until there is room, bounded by ctx (or PublishTimeout), and then fail
// with ResourceExhausted. If ctx ends after the message was handed to the
// store, whether it was queued is unknown: publish again with the same
// idempotency key.
func (s *Service) PublishMessage(ctx context.Context, from, topic string, msg *grain.Message) (PublishResult, error) {
	if msg == nil {
		return PublishResult{}, errs.New(codes.InvalidArgument, "nil message")
	}
	owner, err := ownerOf(from)
	if err != nil {
		return PublishResult{}, err
	}
	t, err := ParseTopic(topic, owner)
	if err != nil {
		return PublishResult{}, err
	}
	if grain.IsReserved(msg.GetMessageType()) {
		return PublishResult{}, errs.New(codes.InvalidArgument, "message type %q: the %q prefix is reserved for the runtime", clip(msg.GetMessageType()), grain.ReservedPrefix)
	}
	if err := checkIdemKey(msg.GetIdempotencyKey()); err != nil {
		return PublishResult{}, err
	}
	m := proto.Clone(msg).(*grain.Message)
	m.Id, m.From, m.To, m.Topic, m.Subscription = grain.NewID(), from, "", t.String(), ""
	m.Kind, m.Attempt, m.CallChainId, m.Deadline, m.CorrelationId = grain.KindRequest, 0, "", nil, ""
	m.OnBehalfOf = "" // a delivery carries its subscriber's owner
	if n := proto.Size(m); n > s.cfg.MaxMessageSize {
		return PublishResult{}, errs.New(codes.ResourceExhausted, "message of %d bytes exceeds the largest publishable, %d", n, s.cfg.MaxMessageSize)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.PublishTimeout)
		defer cancel()
	}
	var full string
	if err := s.waitRegistry(ctx, func(r *Registry) bool {
		for _, sub := range r.Matching(t) {
			if sub.Full {
				full = sub.Record.GetId()
				return false
			}
		}
		return true
	}); err != nil {
		return PublishResult{}, errs.New(codes.ResourceExhausted, "publish to %s: the backlog of subscription %s is full (%d messages)", t, full, s.cfg.MaxBacklog)
	}
	req := &pubReq{topic: t, entry: &Entry{Message: m}, done: make(chan pubResult, 1)}
	if k := m.GetIdempotencyKey(); k != "" {
		req.idem = t.Owner + "/" + owner + "/" + k
	}
	select {
	case s.pubq <- req:
	case <-ctx.Done():
		return PublishResult{}, errs.New(codes.ResourceExhausted, "publish to %s: too many publishes waiting", t)
	case <-s.ctx.Done():
		return PublishResult{}, errs.New(codes.Unavailable, "topics: closed")
	}
	select {
	case r := <-req.done:
		if r.err != nil {
			return PublishResult{}, r.err
		}
		if !r.dup {
			s.stats.published.Add(1)
			if s.cfg.Observe != nil {
				s.cfg.Observe.Published(r.subs)
			}
		}
		return PublishResult{ID: r.id, Subscriptions: r.subs, Duplicate: r.dup}, nil
	case <-ctx.Done():
		return PublishResult{}, errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "publish to %s: outcome unknown (publish again with an idempotency key)", t)
	}
}

// batcher writes the publishes in the order they came, as many as are
// waiting (up to MaxBatch) per Store.Append, with up to MaxAppends appends
// in flight: while they are, publishes queue and make the next batch
// bigger. Publishes in different batches in flight at once overlapped in
// time (a publisher's Publish returns only once its batch is durable), so a
// publisher that waits for each Publish keeps its order.
func (s *Service) batcher() {
	defer s.wg.Done()
	slots := make(chan struct{}, s.cfg.MaxAppends)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		select {
		case slots <- struct{}{}:
		case <-s.ctx.Done():
			s.failPending(errs.New(codes.Unavailable, "topics: closed"))
			return
		}
		var batch []*pubReq
		select {
		case r := <-s.pubq:
			batch = append(batch, r)
		case <-s.ctx.Done():
			s.failPending(errs.New(codes.Unavailable, "topics: closed"))
			return
		}
	more:
		for len(batch) < s.cfg.MaxBatch {
			select {
			case r := <-s.pubq:
				batch = append(batch, r)
			default:
				break more
			}
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-slots }()
			s.commit(batch)
		}()
	}
}

func (s *Service) failPending(err error) {
	for {
		select {
		case r := <-s.pubq:
			r.done <- pubResult{err: err}
		default:
			return
		}
	}
}

// commit appends batch, matching each publish against the registry, and
// again after the registry caught up if the store says it was stale.
func (s *Service) commit(batch []*pubReq) {
	pending := batch
	for attempt := 0; len(pending) > 0; attempt++ {
		r := s.reg.Load()
		items := make([]*Item, 0, len(pending))
		versions := map[string]int64{}
		idem := map[string]*Item{}
		var owners []*Item // per pending: the item it shares an idempotency key with, if any
		for _, p := range pending {
			versions[p.topic.Owner] = r.Versions[p.topic.Owner]
			if first := idem[p.idem]; p.idem != "" && first != nil {
				owners = append(owners, first)
				continue
			}
			subs := r.Matching(p.topic)
			it := &Item{Entry: p.entry, Owner: p.topic.Owner, IdemKey: p.idem, Subs: make([]string, len(subs))}
			for i, sub := range subs {
				it.Subs[i] = sub.Record.GetId()
			}
			if p.idem != "" {
				idem[p.idem] = it
			}
			items = append(items, it)
			owners = append(owners, it)
		}
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		err := s.cfg.Store.Append(ctx, items, versions)
		cancel()
		var stale *StaleError
		if errors.As(err, &stale) && attempt < 20 {
			// Wait for this silo's registry to show what changed, then
			// match again. The items appended already are done.
			var rest []*pubReq
			for i, p := range pending {
				if it := owners[i]; it.Done {
					s.complete(p, it)
				} else {
					rest = append(rest, p)
				}
			}
			pending = rest
			wctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			werr := s.waitRegistry(wctx, func(r *Registry) bool {
				for o, v := range stale.Versions {
					if r.Versions[o] < v {
						return false
					}
				}
				return true
			})
			cancel()
			if werr != nil {
				err = errs.New(codes.Unavailable, "topics: the subscriptions changed and this silo has not seen them yet")
			} else {
				continue
			}
		}
		for i, p := range pending {
			if err != nil && !owners[i].Done {
				p.done <- pubResult{err: err}
				continue
			}
			s.complete(p, owners[i])
		}
		return
	}
}

// complete answers p, whose item it is (or shares its idempotency key).
func (s *Service) complete(p *pubReq, it *Item) {
	switch {
	case it.Entry != p.entry:
		p.done <- pubResult{id: it.Entry.GetMessage().GetId(), dup: true}
	case it.Duplicate:
		p.done <- pubResult{id: it.DuplicateOf, dup: true}
	default:
		p.done <- pubResult{id: p.entry.GetMessage().GetId(), subs: len(it.Subs)}
	}
}

// ParseSubscription parses a subscription id, `owner:name` or a name of
// owner's.
func ParseSubscription(s, owner string) (string, error) {
	o, name, ok := strings.Cut(s, ":")
	if !ok {
		o, name = owner, s
	}
	if !grain.ValidName(o) || !grain.ValidName(name) || len(name) > 64 {
		return "", errs.New(codes.InvalidArgument, "subscription %q: want owner:name, each [A-Za-z0-9][A-Za-z0-9_.@-]* (a name of up to 64)", clip(s))
	}
	return o + ":" + name, nil
}

// Subscribe implements grain.TopicService.
func (s *Service) Subscribe(ctx context.Context, agent grain.Address, name, pattern string, maxAttempts int) error {
	_, err := s.SubscribeAgent(ctx, agent, name, pattern, maxAttempts)
	return err
}

// SubscribeAgent adds agent to its owner's subscription name, creating it
// with pattern (relative to the agent's owner) and maxAttempts (0: the
// default) if it does not exist, and returns the subscription. Everything
// published after it returns is delivered.
func (s *Service) SubscribeAgent(ctx context.Context, agent grain.Address, name, pattern string, maxAttempts int) (*SubscriptionRecord, error) {
	id, err := ParseSubscription(name, agent.Owner)
	if err != nil {
		return nil, err
	}
	if strings.Contains(name, ":") {
		return nil, errs.New(codes.InvalidArgument, "subscription name %q: a name, without an owner (it is the agent's)", clip(name))
	}
	if agent.Type == grain.SessionType {
		return nil, errs.New(codes.InvalidArgument, "a client session subscribes as a session (SubscribeSession)")
	}
	if s.cfg.Known != nil && !s.cfg.Known(agent.Type) {
		return nil, errs.New(codes.NotFound, "agent type %q is not registered", agent.Type)
	}
	p, err := ParsePattern(pattern, agent.Owner)
	if err != nil {
		return nil, err
	}
	maxAttempts, err = s.attempts(maxAttempts)
	if err != nil {
		return nil, err
	}
	// The bounds are checked against this silo's registry: concurrent
	// subscribes through several silos may pass them by a few.
	r := s.reg.Load()
	if sub := r.Subs[id]; sub == nil {
		if n := len(r.Owned(agent.Owner)); n >= s.cfg.MaxSubscriptions {
			return nil, errs.New(codes.ResourceExhausted, "%s has %d subscriptions, the most allowed", agent.Owner, n)
		}
	} else if len(sub.Members) >= s.cfg.MaxMembers {
		return nil, errs.New(codes.ResourceExhausted, "subscription %s has %d agents, the most allowed", id, len(sub.Members))
	}
	rec := &SubscriptionRecord{Id: id, Pattern: p.String(), MaxAttempts: uint32(maxAttempts), CreatedUnixMs: time.Now().UnixMilli()}
	return s.cfg.Store.Subscribe(ctx, rec, agent.String())
}

// attempts is a subscription's bound on deliveries: n, or the default for
// 0; InvalidArgument outside 1 to MaxAttemptsLimit.
func (s *Service) attempts(n int) (int, error) {
	switch {
	case n == 0:
		return s.cfg.MaxAttempts, nil
	case n < 0 || n > MaxAttemptsLimit:
		return 0, errs.New(codes.InvalidArgument, "max attempts %d: want 1 to %d", n, MaxAttemptsLimit)
	}
	return n, nil
}

// SessionSubscriptionName is the name of session's subscription to
// pattern (canonical) when the session gives none: the same for the same
// session and pattern, so that subscribing again (after a re-attach) is
// idempotent.
func SessionSubscriptionName(session, pattern string) string {
	h := sha256.Sum256([]byte(session + "\x00" + pattern))
	return "session-" + hex.EncodeToString(h[:8])
}

// SubscribeSession subscribes the client session at session (on this
// silo, reached through push) to pattern (relative to the session's
// owner), under name ("": SessionSubscriptionName), and returns the
// subscription. This silo delivers it, into the session's backlog (which
// acknowledges a message), for as long as the session lives: until
// Unsubscribe, EndSession, or this silo's end (the member is on a lease of
// the store: a subscription whose session's silo is gone is pruned).
// Everything published after it returns is delivered.
func (s *Service) SubscribeSession(ctx context.Context, session grain.Address, name, pattern string, maxAttempts int, push Push) (*SubscriptionRecord, error) {
	if session.Type != grain.SessionType {
		return nil, errs.New(codes.InvalidArgument, "%s is not a client session", session)
	}
	if push == nil {
		return nil, errs.New(codes.Unavailable, "topics: this silo holds no client sessions")
	}
	p, err := ParsePattern(pattern, session.Owner)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = SessionSubscriptionName(session.String(), p.String())
	}
	if strings.Contains(name, ":") {
		return nil, errs.New(codes.InvalidArgument, "subscription name %q: a name, without an owner (it is the session's)", clip(name))
	}
	id, err := ParseSubscription(name, session.Owner)
	if err != nil {
		return nil, err
	}
	maxAttempts, err = s.attempts(maxAttempts)
	if err != nil {
		return nil, err
	}
	r := s.reg.Load()
	if sub := r.Subs[id]; sub == nil {
		if n := len(r.Owned(session.Owner)); n >= s.cfg.MaxSubscriptions {
			return nil, errs.New(codes.ResourceExhausted, "%s has %d subscriptions, the most allowed", session.Owner, n)
		}
	} else if len(sub.Members) == 0 {
		// Its member went with a silo's lease and it waits out
		// SessionGrace: the session, adopted here, takes it back with its
		// queue; only under the name made for this session and pattern.
		if name != SessionSubscriptionName(session.String(), p.String()) {
			return nil, errs.New(codes.FailedPrecondition, "subscription %s exists and is not this session's", id)
		}
	} else if !sub.Session || len(sub.Members) > 1 || sub.Members[0] != session.String() {
		return nil, errs.New(codes.FailedPrecondition, "subscription %s exists and is not this session's alone", id)
	}
	s.mu.Lock()
	if l := s.local[id]; l != nil && l.session != session.String() {
		s.mu.Unlock()
		return nil, errs.New(codes.FailedPrecondition, "subscription %s is another session's", id)
	}
	// Held before the store has it, so that the registry that shows it
	// finds it local at once.
	s.local[id] = &localSub{session: session.String(), push: push}
	s.mu.Unlock()
	rec := &SubscriptionRecord{Id: id, Pattern: p.String(), MaxAttempts: uint32(maxAttempts), CreatedUnixMs: time.Now().UnixMilli()}
	out, err := s.cfg.Store.SubscribeSession(ctx, rec, session.String())
	if err != nil {
		s.mu.Lock()
		if s.reg.Load().Subs[id] == nil {
			delete(s.local, id)
		}
		s.mu.Unlock()
		return nil, err
	}
	s.Rebalance()
	return out, nil
}

// EndSession removes the subscriptions of the client session at session
// made on this silo: the gateway calls it when it forgets the session
// (closed and expired). It does not block: a goroutine removes them.
func (s *Service) EndSession(session string) {
	s.endMu.Lock()
	s.ended = append(s.ended, session)
	s.endMu.Unlock()
	poke(s.endWake)
}

// reaper removes the subscriptions of the sessions that ended.
func (s *Service) reaper() {
	defer s.wg.Done()
	for {
		select {
		case <-s.endWake:
		case <-s.ctx.Done():
			return
		}
		s.endMu.Lock()
		ended := s.ended
		s.ended = nil
		s.endMu.Unlock()
		for _, sess := range ended {
			s.mu.Lock()
			var ids []string
			for id, l := range s.local {
				if l.session == sess {
					ids = append(ids, id)
				}
			}
			s.mu.Unlock()
			a, err := grain.ParseAddress(sess)
			if err != nil {
				continue
			}
			for _, id := range ids {
				_, name, _ := strings.Cut(id, ":")
				ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
				_, err := s.UnsubscribeAgent(ctx, a, name)
				cancel()
				if err != nil && errs.Code(err) != codes.NotFound && s.ctx.Err() == nil {
					// The lease still ends it with this silo.
					s.cfg.Logger.Warn("topics: could not remove an ended session's subscription", "subscription", id, "session", sess, "err", err)
				}
			}
		}
	}
}

// pushTo delivers msg into the backlog of the session of subscription id.
func (s *Service) pushTo(ctx context.Context, id string, msg *grain.Message) error {
	s.mu.Lock()
	l := s.local[id]
	s.mu.Unlock()
	if l == nil || l.session != msg.GetTo() {
		return errs.New(codes.NotFound, "no client session %s on this silo", msg.GetTo())
	}
	return l.push(ctx, msg)
}

// Unsubscribe implements grain.TopicService.
func (s *Service) Unsubscribe(ctx context.Context, agent grain.Address, name string) error {
	_, err := s.UnsubscribeAgent(ctx, agent, name)
	return err
}

// UnsubscribeAgent removes agent from its owner's subscription name, and
// reports whether that deleted the subscription (it was the last member).
func (s *Service) UnsubscribeAgent(ctx context.Context, agent grain.Address, name string) (bool, error) {
	if strings.Contains(name, ":") {
		return false, errs.New(codes.InvalidArgument, "subscription name %q: a name, without an owner (it is the agent's)", clip(name))
	}
	id, err := ParseSubscription(name, agent.Owner)
	if err != nil {
		return false, err
	}
	deleted, err := s.cfg.Store.Unsubscribe(ctx, id, agent.String())
	if agent.Type == grain.SessionType && (err == nil || errs.Code(err) == codes.NotFound) {
		s.mu.Lock()
		if l := s.local[id]; l != nil && l.session == agent.String() {
			delete(s.local, id)
		}
		s.mu.Unlock()
	}
	return deleted, err
}

// Subscriptions lists owner's subscriptions as the store has them now
// (so a subscription is listed once Subscribe has returned, through any
// silo); the backlog is known for those this silo delivers.
func (s *Service) Subscriptions(ctx context.Context, owner string) ([]*agentsilov1.Subscription, error) {
	r, err := s.cfg.Store.Subscriptions(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []*agentsilov1.Subscription
	for _, sub := range r.Owned(owner) {
		rec := sub.Record
		ps := &agentsilov1.Subscription{
			Id:          rec.GetId(),
			Pattern:     rec.GetPattern(),
			MaxAttempts: rec.GetMaxAttempts(),
			Members:     sub.Members,
			Created:     timestamppb.New(time.UnixMilli(rec.GetCreatedUnixMs())),
		}
		s.mu.Lock()
		e := s.engines[rec.GetId()]
		s.mu.Unlock()
		if e != nil {
			ps.Backlog = uint64(e.backlog())
		}
		out = append(out, ps)
	}
	return out, nil
}

// DeadLetters lists subscription id's dead letters after the id after, at
// most limit (0: 100; at most 1000).
func (s *Service) DeadLetters(ctx context.Context, id, after string, limit int) ([]*DeadLetter, bool, error) {
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 1000:
		return nil, false, errs.New(codes.InvalidArgument, "limit %d: want 1 to 1000", limit)
	}
	if err := checkKey(after); err != nil {
		return nil, false, err
	}
	return s.cfg.Store.DeadLetters(ctx, id, after, limit)
}

// Replay queues dead letters of subscription id again (ids nil: all).
func (s *Service) Replay(ctx context.Context, id string, ids []string) (int, error) {
	if err := checkKeys(ids); err != nil {
		return 0, err
	}
	return s.cfg.Store.Replay(ctx, id, ids)
}

// Drop deletes dead letters of subscription id (ids nil: all).
func (s *Service) Drop(ctx context.Context, id string, ids []string) (int, error) {
	if err := checkKeys(ids); err != nil {
		return 0, err
	}
	return s.cfg.Store.Drop(ctx, id, ids)
}

// MaxIDs bounds the dead letters named in one call.
const MaxIDs = 1000

func checkKeys(ids []string) error {
	if len(ids) > MaxIDs {
		return errs.New(codes.InvalidArgument, "%d ids: at most %d per call", len(ids), MaxIDs)
	}
	for _, k := range ids {
		if k == "" {
			return errs.New(codes.InvalidArgument, "empty dead letter id")
		}
		if err := checkKey(k); err != nil {
			return err
		}
	}
	return nil
}

// checkKey checks a dead letter id from a client: the keys stores make are
// short and plain.
func checkKey(k string) error {
	if len(k) > 64 {
		return errs.New(codes.InvalidArgument, "dead letter id %q: too long", clip(k))
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return errs.New(codes.InvalidArgument, "dead letter id %q: want [A-Za-z0-9_.-]", clip(k))
		}
	}
	return nil
}
