package topicstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
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
	st, err := s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
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
	s.log = st
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
	// reclaimed are the messages handed out from the stream (see
	// reclaim) whose delivery by the consumer has not come yet: false
	// while unsettled, true once settled (its delivery is then
	// acknowledged as it comes).
	reclaimed map[string]bool
	gone      []string // settled (acknowledged, dead): their removal to hand out
	wake      chan struct{}
	// The consumer's sequence of the last delivery to this store, and the
	// highest stream sequence handed out from the log: a delivery whose
	// consumer sequence skips one went to another store following the
	// subscription at the same moment (see fillGap). Used by the
	// following goroutine only.
	lastDelivery, top uint64
}

func newJSFollower() *jsFollower {
	return &jsFollower{msgs: map[string]jetstream.Msg{}, reclaimed: map[string]bool{}, wake: make(chan struct{}, 1)}
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

// settleReclaimed marks key, a reclaimed message not delivered by the
// consumer yet, settled, and notes its removal if gone; false if key is
// not such a message.
func (l *jsFollower) settleReclaimed(key string, gone bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if settled, ok := l.reclaimed[key]; !ok || settled {
		return false
	}
	l.reclaimed[key] = true
	if gone {
		l.gone = append(l.gone, key)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// reclaim hands out, before the consumer delivers anything to this store,
// the log messages that the consumer delivered to a store that stopped
// following subscription id (its silo died) and that were not
// acknowledged. The server would deliver them again only once AckWait has
// passed, after this store had handed out later messages: a publisher's
// order would not hold. They are read from the stream instead, in log
// order (those of the subscription's owner between the consumer's
// acknowledgement floor and its last delivery, and not held apart in the
// queue bucket), and marked reclaimed; when the consumer delivers one
// again, it is taken as the one handed out. One acknowledged above the
// floor comes again: at least once, as everywhere.
func (s *JetStreamStore) reclaim(ctx context.Context, id, owner string, c jetstream.Consumer, l *jsFollower, live map[string]bool, f func(QueueEvent)) error {
	octx, cancel := s.op(ctx)
	info, err := c.Info(octx)
	cancel()
	if err != nil {
		return s.fail(ctx, err, "read the consumer of %s", id)
	}
	l.lastDelivery = info.Delivered.Consumer
	l.top = max(l.top, info.Delivered.Stream)
	// Reclaimed messages settled here and below the floor will not be
	// delivered again: nothing is left to take them as.
	l.mu.Lock()
	for k, settled := range l.reclaimed {
		if seq, err := strconv.ParseUint(k, 16, 64); err == nil && settled && seq <= info.AckFloor.Stream {
			delete(l.reclaimed, k)
		}
	}
	l.mu.Unlock()
	if info.NumAckPending == 0 {
		return nil
	}
	return s.handOut(ctx, id, owner, l, live, info.AckFloor.Stream+1, info.Delivered.Stream, f)
}

// fillGap is called for a message first delivered here at stream sequence
// seq, with the consumer's sequence cseq, before it is handed out. If the
// consumer delivered something to another store since the last delivery
// here (two silos follow the subscription for a moment during a
// handover), the log messages between the highest handed out here and
// seq are read from the stream and handed out first, marked reclaimed, as
// reclaim does: otherwise one the other store got and never settled would
// come again only after AckWait, after later ones. One the other store
// acknowledged comes twice: at least once.
func (s *JetStreamStore) fillGap(ctx context.Context, id, owner string, l *jsFollower, live map[string]bool, seq, cseq uint64, f func(QueueEvent)) {
	gap := cseq > l.lastDelivery+1 && seq > l.top+1
	l.lastDelivery = cseq
	if !gap {
		l.top = max(l.top, seq)
		return
	}
	if err := s.handOut(ctx, id, owner, l, live, l.top+1, seq-1, f); err != nil {
		s.logger.Warn("topics: reading the log messages another silo was given; they come after the acknowledgement wait", "subscription", id, "err", err)
	}
	l.top = max(l.top, seq)
}

// handOut reads the log messages of owner from stream sequence from to
// to, and hands out those naming subscription id that this store does not
// hold, has not handed out, and that are not held apart (live), marked
// reclaimed.
func (s *JetStreamStore) handOut(ctx context.Context, id, owner string, l *jsFollower, live map[string]bool, from, to uint64, f func(QueueEvent)) error {
	subject := s.logSubject(owner)
	for seq := from; seq <= to; {
		octx, cancel := s.op(ctx)
		raw, err := s.log.GetMsg(octx, seq, jetstream.WithGetMsgSubject(subject))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return s.fail(ctx, err, "read the log of %s", id)
		}
		if raw.Sequence > to {
			return nil
		}
		seq = raw.Sequence + 1
		l.top = max(l.top, raw.Sequence)
		key := logKey(raw.Sequence)
		l.mu.Lock()
		_, held := l.msgs[key]
		_, known := l.reclaimed[key]
		l.mu.Unlock()
		if live[key] || held || known || !recordNames(raw.Data, id) {
			continue
		}
		e, err := decodeEntry(raw.Data)
		if err != nil {
			continue // the consumer's delivery of it is skipped likewise
		}
		l.mu.Lock()
		l.reclaimed[key] = false
		l.mu.Unlock()
		f(QueueEvent{Key: key, Entry: e, New: true})
	}
	return nil
}

// isReclaimed reports whether key is a reclaimed message not settled yet.
func (l *jsFollower) isReclaimed(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	settled, ok := l.reclaimed[key]
	return ok && !settled
}

// decodeCache shares the decoding of a log message among the queues this
// store follows: each subscription's consumer delivers its own copy of a
// message, at about the same moment, and an Entry handed out is never
// changed in place (a retry is a new one), so the subscriptions of one
// silo can hold the same Entry. It keeps the last cacheSlots messages
// decoded, of up to cacheMaxBytes each.
type decodeCache struct {
	mu   sync.Mutex
	m    map[uint64]*Entry // by stream sequence
	ring [cacheSlots]uint64
	next int
}

const (
	cacheSlots    = 256
	cacheMaxBytes = 64 << 10
)

// decode returns the entry of the log message b at stream sequence seq.
func (c *decodeCache) decode(seq uint64, b []byte) (*Entry, error) {
	c.mu.Lock()
	e := c.m[seq]
	c.mu.Unlock()
	if e != nil {
		return e, nil
	}
	e, err := decodeEntry(b)
	if err != nil || len(b) > cacheMaxBytes {
		return e, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[uint64]*Entry, cacheSlots)
	}
	if _, ok := c.m[seq]; !ok {
		delete(c.m, c.ring[c.next])
		c.ring[c.next] = seq
		c.next = (c.next + 1) % cacheSlots
		c.m[seq] = e
	}
	c.mu.Unlock()
	return e, nil
}
