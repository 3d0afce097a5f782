package topicstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// On JetStream, a topic owner's log is the subject <bucket>.log.<owner> of
// the stream <bucket>_log, and a subscription is a durable pull consumer
// of that subject (sub_<hash of its id>), created with the subscription
// before its owner's version moves: every publish that saw the new
// version is past the consumer's start. The stream keeps a message while
// a consumer has not acknowledged it (interest retention): the consumers'
// acknowledgement floors are the cursors, and nothing else removes
// messages. A message is one stream message, naming the subscriptions it
// was matched to (a log record); a consumer acknowledges at once those
// not naming its own.
//
// The store that follows a subscription's queue holds the messages the
// consumer delivered until they are settled: acknowledged (the
// consumer's Ack, sent without waiting for each), retried (held apart in
// the queue bucket with their delivery state, and acknowledged), dead
// letters. A message not acknowledged within Config.AckWait (the
// follower's silo died, or holds it that long) is delivered again by the
// server, to whichever store follows the queue then: at least once, as
// everywhere.

func (s *JetStreamStore) logStream() string { return s.cfg.Bucket + "_log" }
func (s *JetStreamStore) logSubject(owner string) string {
	return s.cfg.Bucket + ".log." + enc(owner)
}

// consumerName is the durable consumer of subscription id.
func consumerName(id string) string {
	h := sha256.Sum256([]byte(id))
	return "sub_" + hex.EncodeToString(h[:12])
}

// logKey is the queue key of the log message at stream sequence seq.
func logKey(seq uint64) string { return fmt.Sprintf("%016x", seq) }

// createLog creates (or updates) the log stream.
func (s *JetStreamStore) createLog(ctx context.Context) error {
	_, err := s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:         s.logStream(),
		Subjects:     []string{s.cfg.Bucket + ".log.>"},
		Retention:    jetstream.InterestPolicy,
		MaxBytes:     -1,
		MaxMsgSize:   -1,
		MaxMsgs:      -1,
		MaxConsumers: -1,
		Storage:      jetstream.FileStorage,
		Replicas:     s.cfg.Replicas,
		Duplicates:   s.cfg.Window,
		Discard:      jetstream.DiscardNew,
	})
	if err != nil {
		return s.fail(ctx, err, "create the JetStream stream %s", s.logStream())
	}
	return nil
}

// ensureConsumer creates subscription id's consumer of owner's log if it
// has none (a new subscription, or one of the layout before the log: its
// queue so far is in the queue bucket), starting with what comes next.
func (s *JetStreamStore) ensureConsumer(ctx context.Context, id, owner string) (jetstream.Consumer, error) {
	octx, cancel := s.op(ctx)
	defer cancel()
	c, err := s.js.Consumer(octx, s.logStream(), consumerName(id))
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, s.fail(ctx, err, "read the consumer of %s", id)
	}
	c, err = s.js.CreateOrUpdateConsumer(octx, s.logStream(), jetstream.ConsumerConfig{
		Durable:       consumerName(id),
		Description:   id,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxDeliver:    -1,
		FilterSubject: s.logSubject(owner),
		MaxAckPending: 1 << 16,
		Replicas:      s.cfg.Replicas,
	})
	if err != nil {
		return nil, s.fail(ctx, err, "create the consumer of %s", id)
	}
	return c, nil
}

// deleteConsumer deletes subscription id's consumer: the messages only it
// still wanted go.
func (s *JetStreamStore) deleteConsumer(ctx context.Context, id string) error {
	octx, cancel := s.op(ctx)
	defer cancel()
	if err := s.js.DeleteConsumer(octx, s.logStream(), consumerName(id)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return s.fail(ctx, err, "delete the consumer of %s", id)
	}
	return nil
}

// jsFollower holds the log messages of one subscription whose queue this
// store follows, delivered by its consumer and not settled yet.
type jsFollower struct {
	mu   sync.Mutex
	msgs map[string]jetstream.Msg // by key
	gone []string                 // settled (acknowledged, dead): their removal to hand out
	wake chan struct{}
}

func newJSFollower() *jsFollower {
	return &jsFollower{msgs: map[string]jetstream.Msg{}, wake: make(chan struct{}, 1)}
}

// take removes key's message, and notes its removal if gone; nil if it
// is not held.
func (l *jsFollower) take(key string, gone bool) jetstream.Msg {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.msgs[key]
	if m == nil {
		return nil
	}
	delete(l.msgs, key)
	if gone {
		l.gone = append(l.gone, key)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return m
}

func (l *jsFollower) takeGone() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gone
	l.gone = nil
	return g
}

// held returns the keys of the messages held, in log order.
func (l *jsFollower) held() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]string, 0, len(l.msgs))
	for k := range l.msgs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (s *JetStreamStore) jsFollowerOf(id string) *jsFollower {
	s.followMu.Lock()
	defer s.followMu.Unlock()
	return s.logFollowers[id]
}

// seqOf is m's stream sequence (0 if its metadata is unreadable).
func seqOf(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}
