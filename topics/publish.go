package topics

import (
	"context"
	"errors"
	"sync"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/topicstore"
)

// pubReq is one publish waiting for the batcher.
type pubReq struct {
	topic Topic
	entry *topicstore.Entry
	idem  string
	done  chan pubResult // buffered
	// group are the publishes of a PublishBatch after this one: the
	// batcher puts them in the same append, after it.
	group []*pubReq
}

type pubResult struct {
	id   string
	subs int
	dup  bool
	err  error
}

// ownerOf returns the owner of a sender's address (an agent or a session).
func ownerOf(from string) (string, error) {
	a, err := grain.ParseAddress(from)
	if err != nil {
		return "", errs.New(codes.InvalidArgument, "publisher %q: %w", clip(from), err)
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
func (s *Service) PublishMessage(ctx context.Context, from, topic string, msg *grain.Message) (res PublishResult, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.PublishTimeout)
		defer cancel()
	}
	req, end, err := s.prepare(ctx, from, topic, msg)
	if end != nil {
		defer func() { end(err) }()
	}
	if err != nil {
		return PublishResult{}, err
	}
	if err := s.enqueue(ctx, req); err != nil {
		return PublishResult{}, err
	}
	return s.await(ctx, req)
}

// Publication is one message of PublishBatch: msg to topic.
type Publication struct {
	Topic   string
	Message *grain.Message
}

// PublishBatch publishes ps on behalf of from, in their order, in one
// append to the store (one transaction on etcd, unless it is larger than
// one holds), and returns once each is durable or failed: results[i] and
// errs[i] are ps[i]'s, as PublishMessage's. A message refused before it
// is written (a bad topic, too large, a full backlog) fails alone; the
// others are published.
func (s *Service) PublishBatch(ctx context.Context, from string, ps []Publication) (results []PublishResult, failed []error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.PublishTimeout)
		defer cancel()
	}
	results, failed = make([]PublishResult, len(ps)), make([]error, len(ps))
	reqs := make([]*pubReq, len(ps))
	ends := make([]func(error), len(ps))
	var group []*pubReq
	for i, p := range ps {
		reqs[i], ends[i], failed[i] = s.prepare(ctx, from, p.Topic, p.Message)
		if failed[i] == nil {
			group = append(group, reqs[i])
		}
	}
	if len(group) > 0 {
		head := group[0]
		head.group = group[1:]
		if err := s.enqueue(ctx, head); err != nil {
			for i := range reqs {
				if failed[i] == nil {
					failed[i] = err
				}
			}
		}
	}
	for i, r := range reqs {
		if failed[i] == nil {
			results[i], failed[i] = s.await(ctx, r)
		}
		if ends[i] != nil {
			ends[i](failed[i])
		}
	}
	return results, failed
}

// prepare checks a publish and makes its request, once there is room in
// the backlogs of its subscriptions; end, if not nil, ends its span.
func (s *Service) prepare(ctx context.Context, from, topic string, msg *grain.Message) (_ *pubReq, end func(error), err error) {
	if msg == nil {
		return nil, nil, errs.New(codes.InvalidArgument, "nil message")
	}
	owner, err := ownerOf(from)
	if err != nil {
		return nil, nil, err
	}
	t, err := ParseTopic(topic, owner)
	if err != nil {
		return nil, nil, err
	}
	if grain.IsReserved(msg.MessageType) {
		return nil, nil, errs.New(codes.InvalidArgument, "message type %q: the %q prefix is reserved for the runtime", clip(msg.MessageType), grain.ReservedPrefix)
	}
	if err := checkIdemKey(msg.IdempotencyKey); err != nil {
		return nil, nil, err
	}
	m := copyMessage(grain.MessageToProto(msg))
	if m.Traceparent == "" {
		m.Traceparent = grain.Traceparent(ctx) // a publish from outside a turn
	}
	m.Id, m.From, m.To, m.Topic, m.Subscription = grain.NewID(), from, "", t.String(), ""
	m.Kind, m.Attempt, m.CallChainId, m.Deadline, m.CorrelationId = agentsilov1.Kind_KIND_REQUEST, 0, "", nil, ""
	m.OnBehalfOf = "" // a delivery carries its subscriber's owner
	if n := proto.Size(m); n > s.cfg.MaxMessageSize {
		return nil, nil, errs.New(codes.ResourceExhausted, "message of %d bytes exceeds the largest publishable, %d", n, s.cfg.MaxMessageSize)
	}
	end = s.tracePublish(ctx, m, t)
	var full string
	if err := s.waitRegistry(ctx, func(r *topicstore.Registry) bool {
		for _, sub := range r.Matching(topicstore.Topic(t)) {
			if sub.Full {
				full = sub.Record.GetId()
				return false
			}
		}
		return true
	}); err != nil {
		return nil, end, errs.New(codes.ResourceExhausted, "publish to %s: the backlog of subscription %s is full (%d messages)", t, full, s.cfg.MaxBacklog)
	}
	req := &pubReq{topic: t, entry: &topicstore.Entry{Message: m}, done: make(chan pubResult, 1)}
	if k := m.GetIdempotencyKey(); k != "" {
		req.idem = t.Owner + "/" + owner + "/" + k
	}
	return req, end, nil
}

// enqueue hands req (and its group) to the batcher.
func (s *Service) enqueue(ctx context.Context, req *pubReq) error {
	select {
	case s.pubq <- req:
		return nil
	case <-ctx.Done():
		return errs.New(codes.ResourceExhausted, "publish to %s: too many publishes waiting", req.topic)
	case <-s.ctx.Done():
		return errs.New(codes.Unavailable, "topics: closed")
	}
}

// await waits for req's outcome.
func (s *Service) await(ctx context.Context, req *pubReq) (PublishResult, error) {
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
		return PublishResult{}, errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "publish to %s: outcome unknown (publish again with an idempotency key)", req.topic)
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
			batch = append(batch, r.group...)
		case <-s.ctx.Done():
			s.failPending(errs.New(codes.Unavailable, "topics: closed"))
			return
		}
	more:
		for len(batch) < s.cfg.MaxBatch {
			select {
			case r := <-s.pubq:
				batch = append(batch, r)
				batch = append(batch, r.group...)
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
			for _, g := range r.group {
				g.done <- pubResult{err: err}
			}
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
		items := make([]*topicstore.Item, 0, len(pending))
		versions := map[string]int64{}
		idem := map[string]*topicstore.Item{}
		var owners []*topicstore.Item // per pending: the item it shares an idempotency key with, if any
		for _, p := range pending {
			versions[p.topic.Owner] = r.Versions[p.topic.Owner]
			if first := idem[p.idem]; p.idem != "" && first != nil {
				owners = append(owners, first)
				continue
			}
			subs := r.Matching(topicstore.Topic(p.topic))
			it := &topicstore.Item{Entry: p.entry, Owner: p.topic.Owner, IdemKey: p.idem, Subs: make([]string, len(subs))}
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
		err := s.cfg.store.Append(ctx, items, versions)
		cancel()
		var stale *topicstore.StaleError
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
			werr := s.waitRegistry(wctx, func(r *topicstore.Registry) bool {
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
func (s *Service) complete(p *pubReq, it *topicstore.Item) {
	switch {
	case it.Duplicate:
		// A duplicate of a message kept earlier: p's answer is that
		// message's id, whether p is the item or shares its key.
		p.done <- pubResult{id: it.DuplicateOf, dup: true}
	case it.Entry != p.entry:
		p.done <- pubResult{id: it.Entry.GetMessage().GetId(), dup: true}
	default:
		p.done <- pubResult{id: p.entry.GetMessage().GetId(), subs: len(it.Subs)}
	}
}
