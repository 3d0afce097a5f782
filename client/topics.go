package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/retry"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Topics is publish/subscribe through the gateway's Topics service, and
// Broadcast. Reach it with Client.Topics.
//
// A topic is `owner:name` (name: dot-separated segments, e.g.
// orders.created.eu), or a name of the client's own principal. A
// subscription is `owner:name` after its agents' owner and selects one
// owner's topics with a pattern (`*` one segment, `#` zero or more); each
// message it selects goes to one of its agents, at least once, until the
// agent's handler acknowledges it (returns nil), or it becomes a dead
// letter.
//
// Two kinds of subscriber, two pairs of calls: an agent's subscription
// (Subscribe, Unsubscribe, Subscriptions), durable, and the session's
// (SubscribeSession, UnsubscribeSession, SessionSubscriptions), whose
// messages reach Client.Messages and which ends with the session.
type Topics struct{ c *Client }

// Topics returns the client's publish/subscribe.
func (c *Client) Topics() Topics { return Topics{c} }

// Publish publishes msg to topic and returns once the message is durable:
// it is then delivered to every subscription whose pattern matches, and
// the messages this Client publishes reach each subscription in the order
// published. A subscription whose backlog is full makes Publish wait,
// bounded by ctx (or the client's timeout): then ResourceExhausted.
//
// With msg.IdempotencyKey set, a publish that failed with Unavailable (its
// gateway went away: the outcome is unknown) is sent again, through the
// gateway the session moves to, until ctx ends: within the cluster's
// window (10 minutes) the key is queued once.
func (t Topics) Publish(ctx context.Context, topic string, msg *Message) (_ PublishResult, err error) {
	c := t.c
	m := &agentsilov1.AgentMessage{}
	if msg != nil {
		m = grain.MessageToProto(msg)
	}
	if n := proto.Size(m); n > c.opts.maxSize {
		return PublishResult{}, errs.New(codes.ResourceExhausted, "message of %d bytes exceeds the maximum of %d: not sent", n, c.opts.maxSize)
	}
	ctx, span := c.startSpan(ctx, "agentsilo Publish", m)
	defer func() { endSpan(span, err) }()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.timeout)
		defer cancel()
	}
	req := &agentsilov1.PublishRequest{Topic: topic, Message: m, Publisher: c.publisher()}
	b := retry.Resend.New(nil)
	for {
		uctx, cancel, _ := c.unary(ctx)
		r, err := agentsilov1.NewTopicsClient(c.conns[c.connIndex()]).Publish(uctx, req)
		cancel()
		if err == nil {
			return PublishResult{ID: r.GetId(), Subscriptions: int(r.GetSubscriptions()), Duplicate: r.GetDuplicate()}, nil
		}
		err = errs.FromStatus(err)
		if m.GetIdempotencyKey() == "" || errs.Code(err) != codes.Unavailable || ctx.Err() != nil || !b.Wait(ctx, nil) {
			return PublishResult{}, err
		}
	}
}

// PublishBatch publishes ps (at most 1,000) in one call to the gateway, in
// their order, as Publish would one after another (their order is kept
// with the Client's other publishes), written together, and returns once
// each is durable or failed: results[i] is ps[i]'s. A message the cluster
// refuses (a bad topic, a permission, a full backlog at the deadline)
// fails alone. err is the call's: then none has a result, and whether they
// were published is unknown unless it says so (InvalidArgument,
// ResourceExhausted: not sent); a batch whose every message has an
// IdempotencyKey is sent again after Unavailable, as Publish does.
func (t Topics) PublishBatch(ctx context.Context, ps []Publication) (results []BatchResult, err error) {
	c := t.c
	req := &agentsilov1.PublishBatchRequest{Entries: make([]*agentsilov1.PublishRequest, len(ps)), Publisher: c.publisher()}
	size, keyed := 0, len(ps) > 0
	for i, p := range ps {
		m := &agentsilov1.AgentMessage{}
		if p.Message != nil {
			m = grain.MessageToProto(p.Message)
		}
		n := proto.Size(m)
		if n > c.opts.maxSize {
			return nil, errs.New(codes.ResourceExhausted, "message %d of %d bytes exceeds the maximum of %d: not sent", i, n, c.opts.maxSize)
		}
		size += n + len(p.Topic) + 16
		keyed = keyed && m.GetIdempotencyKey() != ""
		req.Entries[i] = &agentsilov1.PublishRequest{Topic: p.Topic, Message: m}
	}
	if size > c.opts.maxSize {
		return nil, errs.New(codes.ResourceExhausted, "a batch of %d bytes exceeds the maximum of %d: not sent; send fewer at once", size, c.opts.maxSize)
	}
	ctx, span := c.startSpan(ctx, "agentsilo PublishBatch", &agentsilov1.AgentMessage{})
	defer func() { endSpan(span, err) }()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.timeout)
		defer cancel()
	}
	b := retry.Resend.New(nil)
	for {
		uctx, cancel, _ := c.unary(ctx)
		r, err := agentsilov1.NewTopicsClient(c.conns[c.connIndex()]).PublishBatch(uctx, req)
		cancel()
		if err == nil {
			results = make([]BatchResult, len(ps))
			for i, x := range r.GetResults() {
				if i == len(results) {
					break
				}
				if p := x.GetPublished(); p != nil {
					results[i].PublishResult = PublishResult{ID: p.GetId(), Subscriptions: int(p.GetSubscriptions()), Duplicate: p.GetDuplicate()}
				} else {
					results[i].Err = errs.FromStatus(status.Error(codes.Code(x.GetCode()), x.GetError()))
				}
			}
			for i := len(r.GetResults()); i < len(results); i++ {
				results[i].Err = errs.New(codes.Internal, "the gateway gave no result for message %d: it may have landed (publish again with an idempotency key)", i)
			}
			return results, nil
		}
		err = errs.FromStatus(err)
		if !keyed || errs.Code(err) != codes.Unavailable || ctx.Err() != nil || !b.Wait(ctx, nil) {
			return nil, err
		}
	}
}

// publisher is the Client's publisher address: a session address of its
// principal, the same for the Client's life (across re-attaches to other
// gateways), so that its messages keep their order.
func (c *Client) publisher() string {
	c.pubOnce.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:])
		p := c.Principal()
		if p == "" {
			p = c.opts.principal
		}
		c.pub = "Session:" + p + ":pub-" + hex.EncodeToString(b[:])
	})
	return c.pub
}

// topics prepares a call to the Topics service of the session's gateway.
func (c *Client) topics(ctx context.Context) (context.Context, context.CancelFunc, agentsilov1.TopicsClient) {
	ctx, cancel, _ := c.unary(ctx)
	return ctx, cancel, agentsilov1.NewTopicsClient(c.conns[c.connIndex()])
}

// Subscribe adds the agent at agent to the subscription name of the
// agent's owner, creating it with pattern (and MaxAttempts, default 5) if
// it does not exist. Everything published after it returns is delivered.
// Options: MaxAttempts.
func (t Topics) Subscribe(ctx context.Context, agent, name, pattern string, opts ...CallOption) (Subscription, error) {
	o, err := callOpts("subscribe", opts, optMaxAttempts)
	if err != nil {
		return Subscription{}, err
	}
	ctx, cancel, tc := t.c.topics(ctx)
	defer cancel()
	r, err := tc.Subscribe(ctx, &agentsilov1.SubscribeRequest{Agent: agent, Name: name, Pattern: pattern, MaxAttempts: uint32(min(o.maxAttempts, 1<<20))})
	if err != nil {
		return Subscription{}, errs.FromStatus(err)
	}
	return subscription(r.GetSubscription()), nil
}

// sessionSubs are the patterns the session subscribed to, with the names
// of their subscriptions.
type sessionSubs struct {
	mu     sync.Mutex
	byPat  map[string]string // pattern as given → subscription name
	closed bool
}

// SubscribeSession subscribes this session to the topics pattern selects
// (`*` one segment, `#` zero or more; relative to the client's principal,
// or `owner:pattern`, which needs Read on the owner's topics): each message
// published to them from now on reaches Messages (or WithOnMessage) with
// its Topic and Subscription set, in publish order per publisher, at least
// once. A message is acknowledged once it is in the session's backlog on
// its gateway; a full backlog (the client not reading) makes the
// subscription wait, and then its publishers.
//
// The subscription lives as long as the session: Close removes it, and so
// does the gateway when it forgets the session (detached longer than its
// backlog age), or, with its silo gone, etcd when the silo's lease ends.
// After a re-attach the client subscribes again by itself (a session that
// had to be opened afresh, with a new Address, loses what was published
// in between). Subscribing to a pattern again is no error.
func (t Topics) SubscribeSession(ctx context.Context, pattern string) (Subscription, error) {
	c := t.c
	c.takes.Store(true) // what is published is acknowledged before it is read: it must not be dropped
	s, err := c.subscribeSession(ctx, pattern)
	if err != nil {
		return Subscription{}, err
	}
	_, name, _ := strings.Cut(s.ID, ":")
	c.sessSubs.mu.Lock()
	if c.sessSubs.byPat == nil {
		c.sessSubs.byPat = map[string]string{}
	}
	c.sessSubs.byPat[pattern] = name
	c.sessSubs.mu.Unlock()
	return s, nil
}

func (c *Client) subscribeSession(ctx context.Context, pattern string) (Subscription, error) {
	addr := c.Address()
	ctx, cancel, tc := c.topics(ctx)
	defer cancel()
	r, err := tc.Subscribe(ctx, &agentsilov1.SubscribeRequest{Agent: addr, Pattern: pattern})
	if err != nil {
		return Subscription{}, errs.FromStatus(err)
	}
	return subscription(r.GetSubscription()), nil
}

// UnsubscribeSession ends the session's subscription to pattern (as given
// to SubscribeSession); NotFound if there is none.
func (t Topics) UnsubscribeSession(ctx context.Context, pattern string) error {
	c := t.c
	c.sessSubs.mu.Lock()
	name, ok := c.sessSubs.byPat[pattern]
	delete(c.sessSubs.byPat, pattern)
	c.sessSubs.mu.Unlock()
	if !ok {
		return errs.New(codes.NotFound, "this session is not subscribed to %q", pattern)
	}
	_, err := t.Unsubscribe(ctx, c.Address(), name)
	return err
}

// SessionSubscriptions returns the patterns the session is subscribed to,
// sorted.
func (t Topics) SessionSubscriptions() []string { return t.c.sessionPatterns() }

func (c *Client) sessionPatterns() []string {
	c.sessSubs.mu.Lock()
	defer c.sessSubs.mu.Unlock()
	out := make([]string, 0, len(c.sessSubs.byPat))
	for p := range c.sessSubs.byPat {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// resubscribeLocked subscribes the session again to its patterns, in the
// background, after a re-attach (the session may have moved to another
// gateway, or been opened afresh). c.mu is held.
func (c *Client) resubscribeLocked() {
	c.sessSubs.mu.Lock()
	n := len(c.sessSubs.byPat)
	c.sessSubs.mu.Unlock()
	if n == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		b := retry.Reattach.New(nil)
		for _, p := range c.sessionPatterns() {
			for {
				s, err := c.subscribeSession(c.ctx, p)
				if err == nil {
					_, name, _ := strings.Cut(s.ID, ":")
					c.sessSubs.mu.Lock()
					if _, ok := c.sessSubs.byPat[p]; ok {
						c.sessSubs.byPat[p] = name
					}
					c.sessSubs.mu.Unlock()
					break
				}
				// Denied or invalid now: it stays gone. Unavailable: the
				// gateway went away again, and the next re-attach retries.
				if c.ctx.Err() != nil || errs.Code(err) != codes.Unavailable || !b.Wait(c.ctx, nil) {
					break
				}
			}
		}
	}()
}

// endSessionSubs removes the session's subscriptions (Close), within the
// client's timeout; what it cannot remove, the gateway does when it
// forgets the session.
func (c *Client) endSessionSubs() {
	c.sessSubs.mu.Lock()
	if c.sessSubs.closed {
		c.sessSubs.mu.Unlock()
		return
	}
	c.sessSubs.closed = true
	byPat := c.sessSubs.byPat
	c.sessSubs.byPat = nil
	c.sessSubs.mu.Unlock()
	if len(byPat) == 0 {
		return
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return
	}
	// Bounded shortly: a gateway gone makes Close wait no longer.
	ctx, cancel := context.WithTimeout(context.Background(), min(c.opts.timeout, 5*time.Second))
	defer cancel()
	addr := c.Address()
	for _, name := range byPat {
		if _, err := c.Topics().Unsubscribe(ctx, addr, name); err != nil && ctx.Err() != nil {
			return
		}
	}
}

// Unsubscribe removes the agent from its owner's subscription name, and
// reports whether that deleted the subscription (it was the last agent):
// its backlog and dead letters go with it.
func (t Topics) Unsubscribe(ctx context.Context, agent, name string) (deleted bool, err error) {
	ctx, cancel, tc := t.c.topics(ctx)
	defer cancel()
	r, err := tc.Unsubscribe(ctx, &agentsilov1.UnsubscribeRequest{Agent: agent, Name: name})
	if err != nil {
		return false, errs.FromStatus(err)
	}
	return r.GetDeleted(), nil
}

// Subscriptions lists owner's subscriptions ("": the client's principal's)
// that the client may read.
func (t Topics) Subscriptions(ctx context.Context, owner string) ([]Subscription, error) {
	ctx, cancel, tc := t.c.topics(ctx)
	defer cancel()
	r, err := tc.ListSubscriptions(ctx, &agentsilov1.ListSubscriptionsRequest{Owner: owner})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	subs := make([]Subscription, len(r.GetSubscriptions()))
	for i, s := range r.GetSubscriptions() {
		subs[i] = subscription(s)
	}
	return subs, nil
}

// DeadLetters returns a page of a subscription's dead letters, oldest
// first: at most Limit (0: 100), After the cursor of the page before.
// Options: After, Limit.
func (t Topics) DeadLetters(ctx context.Context, subscription string, opts ...CallOption) (Page[DeadLetter], error) {
	o, err := callOpts("list dead letters", opts, optAfter|optLimit)
	if err != nil {
		return Page[DeadLetter]{}, err
	}
	ctx, cancel, tc := t.c.topics(ctx)
	defer cancel()
	r, err := tc.ListDeadLetters(ctx, &agentsilov1.ListDeadLettersRequest{Subscription: subscription, After: o.after, Limit: uint32(min(o.limit, 1<<20))})
	if err != nil {
		return Page[DeadLetter]{}, errs.FromStatus(err)
	}
	p := Page[DeadLetter]{Items: make([]DeadLetter, len(r.GetDeadLetters()))}
	for i, d := range r.GetDeadLetters() {
		p.Items[i] = deadLetter(d)
	}
	if r.GetMore() && len(p.Items) > 0 {
		p.Next = p.Items[len(p.Items)-1].ID
	}
	return p, nil
}

// ReplayDeadLetters queues the dead letters ids of subscription again, at
// the end of its queue with their attempts from 1; no ids replays every
// one. It returns how many it queued.
func (t Topics) ReplayDeadLetters(ctx context.Context, subscription string, ids ...string) (int, error) {
	ctx, cancel, tc := t.c.topics(ctx)
	defer cancel()
	r, err := tc.ReplayDeadLetters(ctx, &agentsilov1.ReplayDeadLettersRequest{Subscription: subscription, Ids: ids, All: len(ids) == 0})
	if err != nil {
		return 0, errs.FromStatus(err)
	}
	return int(r.GetCount()), nil
}

// DropDeadLetters deletes the dead letters ids of subscription; no ids
// drops every one. It returns how many it deleted.
func (t Topics) DropDeadLetters(ctx context.Context, subscription string, ids ...string) (int, error) {
	ctx, cancel, tc := t.c.topics(ctx)
	defer cancel()
	r, err := tc.DropDeadLetters(ctx, &agentsilov1.DropDeadLettersRequest{Subscription: subscription, Ids: ids, All: len(ids) == 0})
	if err != nil {
		return 0, errs.FromStatus(err)
	}
	return int(r.GetCount()), nil
}

// Broadcast sends msg (ONE_WAY, or an EVENT if its Kind is KindEvent) to
// every active agent of the cluster whose address matches the glob pattern
// (e.g. `Worker:acme:*`) and returns how many it reached. A pattern of
// another owner's agents needs Message on them; a pattern whose owner is
// not literal, an operator.
func (t Topics) Broadcast(ctx context.Context, pattern string, msg *Message) (int, error) {
	m := &agentsilov1.AgentMessage{}
	if msg != nil {
		m = grain.MessageToProto(msg)
	}
	ctx, cancel, tc := t.c.topics(ctx)
	defer cancel()
	r, err := tc.Broadcast(ctx, &agentsilov1.BroadcastRequest{Pattern: pattern, Message: m})
	if err != nil {
		return 0, errs.FromStatus(err)
	}
	return int(r.GetReached()), nil
}
