package topics

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/names"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// ParseSubscription parses a subscription id, `owner:name` or a name of
// owner's.
func ParseSubscription(s, owner string) (string, error) {
	o, name, ok := strings.Cut(s, ":")
	if !ok {
		o, name = owner, s
	}
	if !names.Valid(o) || !names.Valid(name) || len(name) > 64 {
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
	return s.cfg.store.Subscribe(ctx, rec, agent.String())
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

// sessionSubscriptionName is the name of session's subscription to
// pattern (canonical) when the session gives none: the same for the same
// session and pattern, so that subscribing again (after a re-attach) is
// idempotent.
func sessionSubscriptionName(session, pattern string) string {
	h := sha256.Sum256([]byte(session + "\x00" + pattern))
	return "session-" + hex.EncodeToString(h[:8])
}

// SubscribeSession subscribes the client session at session (on this
// silo, reached through push) to pattern (relative to the session's
// owner), under name ("": sessionSubscriptionName), and returns the
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
		name = sessionSubscriptionName(session.String(), p.String())
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
		if name != sessionSubscriptionName(session.String(), p.String()) {
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
	out, err := s.cfg.store.SubscribeSession(ctx, rec, session.String())
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
func (s *Service) pushTo(ctx context.Context, id string, msg *agentsilov1.AgentMessage) error {
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
	deleted, err := s.cfg.store.Unsubscribe(ctx, id, agent.String())
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
// silo); the backlog and the deliveries in flight are known for those
// this silo delivers.
func (s *Service) Subscriptions(ctx context.Context, owner string) ([]*agentsilov1.Subscription, error) {
	r, err := s.cfg.store.Subscriptions(ctx, owner)
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
			n, inflight := e.counts()
			ps.Backlog, ps.InFlight = uint64(n), uint64(inflight)
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
	return s.cfg.store.DeadLetters(ctx, id, after, limit)
}

// Replay queues dead letters of subscription id again (ids nil: all).
func (s *Service) Replay(ctx context.Context, id string, ids []string) (int, error) {
	if err := checkKeys(ids); err != nil {
		return 0, err
	}
	return s.cfg.store.Replay(ctx, id, ids)
}

// Drop deletes dead letters of subscription id (ids nil: all).
func (s *Service) Drop(ctx context.Context, id string, ids []string) (int, error) {
	if err := checkKeys(ids); err != nil {
		return 0, err
	}
	return s.cfg.store.Drop(ctx, id, ids)
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
