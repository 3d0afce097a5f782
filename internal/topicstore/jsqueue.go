package topicstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// idemK is the idempotency bucket's key of k.
func idemK(k string) string {
	h := sha256.Sum256([]byte(k))
	return hex.EncodeToString(h[:16])
}

// publish writes msgs asynchronously (in order, on one connection) and
// waits for each one's acknowledgement; acks[i] is msgs[i]'s, nil if it is
// not durable.
func (s *JetStreamStore) publish(ctx context.Context, msgs []*nats.Msg, ids []string) (acks []*jetstream.PubAck, err error) {
	opts := make([][]jetstream.PublishOpt, len(msgs))
	for i := range msgs {
		if ids[i] != "" {
			opts[i] = []jetstream.PublishOpt{jetstream.WithMsgID(ids[i])}
		}
	}
	acks, refused, err := s.publishEach(ctx, msgs, opts)
	for i, e := range refused {
		if e != nil && err == nil {
			err = s.fail(ctx, e, "write %s", msgs[i].Subject)
		}
	}
	return acks, err
}

// publishEach writes msgs asynchronously, msgs[i] with opts[i], and waits
// for their acknowledgements: acks[i] is msgs[i]'s, refused[i] its refusal
// (one of the two is nil). err is set if the waiting was cut short (the
// server did not answer in time, ctx ended, the connection refused): then
// the messages without an answer have a non-nil refused[i] too.
func (s *JetStreamStore) publishEach(ctx context.Context, msgs []*nats.Msg, opts [][]jetstream.PublishOpt) (acks []*jetstream.PubAck, refused []error, err error) {
	acks, refused = make([]*jetstream.PubAck, len(msgs)), make([]error, len(msgs))
	futs := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, perr := s.js.PublishMsgAsync(m, opts[i]...)
		if perr != nil {
			for j := i; j < len(msgs); j++ {
				refused[j] = perr
			}
			err = s.fail(ctx, perr, "write %s", m.Subject)
			break
		}
		futs[i] = f
	}
	t := time.NewTimer(s.cfg.OpTimeout)
	defer t.Stop()
	for i, f := range futs {
		if f == nil {
			break
		}
		if err != nil && refused[i] == nil {
			refused[i] = err
			continue
		}
		select {
		case a := <-f.Ok():
			acks[i] = a
			if !a.Duplicate {
				s.writes.Add(1)
			}
		case e := <-f.Err():
			refused[i] = e
		case <-t.C:
			err = s.fail(ctx, errors.New("no acknowledgement in time"), "write %s", msgs[i].Subject)
			refused[i] = err
		case <-ctx.Done():
			err = s.fail(ctx, ctx.Err(), "write %s", msgs[i].Subject)
			refused[i] = err
		}
	}
	return acks, refused, err
}

// keptID is the id of the message the log kept at seq, which a keyed
// write was a duplicate of: read from the log, or, if every subscription
// has acknowledged it since (it is gone), from the remembered key.
func (s *JetStreamStore) keptID(ctx context.Context, key string, seq uint64) (string, error) {
	octx, cancel := s.op(ctx)
	defer cancel()
	m, err := s.log.GetMsg(octx, seq)
	switch {
	case err == nil:
		e, derr := decodeEntry(m.Data)
		if derr != nil {
			return "", errs.New(codes.Internal, "topics: decode the log message %d: %w", seq, derr)
		}
		return e.GetMessage().GetId(), nil
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return "", s.fail(ctx, err, "read the log message %d", seq)
	}
	e, found, err := s.get(ctx, s.idem, idemK(key))
	if err != nil {
		return "", err
	}
	if !found {
		return "", errs.New(codes.Unavailable, "topics: the message kept for an idempotency key is delivered and gone, and its id not remembered yet: publish again")
	}
	return string(e.Value()), nil
}

func (s *JetStreamStore) qSubject(id, key string) string {
	return "$KV." + s.cfg.Bucket + "_q." + itemK(id, key)
}

// Append implements Store: one message of the log per item, whatever the
// number of subscriptions it was matched to.
func (s *JetStreamStore) Append(ctx context.Context, items []*Item, versions map[string]int64) error {
	if err := ctx.Err(); err != nil {
		return errs.Wrap(errs.Code(err), err, "append")
	}
	var stale bool
	cur := make(map[string]int64, len(versions))
	for o, v := range versions {
		e, found, err := s.get(ctx, s.reg, verK(o))
		if err != nil {
			return err
		}
		if found {
			cur[o] = int64(e.Revision())
		}
		if cur[o] != v {
			stale = true
		}
	}
	if stale {
		return &StaleError{Versions: cur}
	}
	firsts, err := s.firsts(ctx, items)
	if err != nil {
		return err
	}
	var msgs []*nats.Msg
	var ids []string
	owner := make([]int, 0, len(items)) // the item of each message
	for i, it := range items {
		if it.IdemKey != "" {
			if first := firsts[i]; first != "" && first != it.Entry.GetMessage().GetId() {
				it.Duplicate, it.DuplicateOf, it.Done = true, first, true
				continue
			}
		}
		if len(it.Subs) == 0 {
			continue
		}
		if it.Owner == "" {
			return errs.New(codes.InvalidArgument, "append: an item without its topic's owner")
		}
		b, err := encodeRecord(it.Entry, it.Subs)
		if err != nil {
			return err
		}
		msgs = append(msgs, &nats.Msg{Subject: s.logSubject(it.Owner), Data: b})
		mid := ""
		if it.IdemKey != "" {
			mid = idemK(it.IdemKey)
		}
		ids = append(ids, mid)
		owner = append(owner, i)
	}
	acks, err := s.publish(ctx, msgs, ids)
	done := make([]bool, len(items))
	for i := range done {
		done[i] = true
	}
	// kept[i] is the id of the message kept for items[i]: its own, or,
	// if the log had a message with its key already (an earlier attempt
	// wrote it, and may not have remembered the key yet, or never will),
	// that message's, which is the one subscribers get.
	kept := make([]string, len(items))
	for i, it := range items {
		kept[i] = it.Entry.GetMessage().GetId()
	}
	for j, i := range owner {
		switch a := acks[j]; {
		case a == nil:
			done[i] = false
		case a.Duplicate:
			id, kerr := s.keptID(ctx, items[i].IdemKey, a.Sequence)
			if kerr != nil {
				done[i] = false
				if err == nil {
					err = kerr
				}
				continue
			}
			kept[i] = id
		}
	}
	// The idempotency keys of the items written, all in flight at once,
	// each written only if it is new, with the id kept.
	var keyed []int
	var keys []*nats.Msg
	var opts [][]jetstream.PublishOpt
	for i, it := range items {
		if !done[i] || it.Duplicate {
			continue
		}
		if it.IdemKey == "" {
			it.Done = true
			continue
		}
		keyed = append(keyed, i)
		keys = append(keys, &nats.Msg{Subject: "$KV." + s.cfg.Bucket + "_idem." + idemK(it.IdemKey), Data: []byte(kept[i])})
		opts = append(opts, []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(0)})
	}
	if len(keys) == 0 {
		return err
	}
	_, kerrs, kerr := s.publishEach(ctx, keys, opts)
	for j, i := range keyed {
		it := items[i]
		var apiErr *jetstream.APIError
		switch e := kerrs[j]; {
		case e == nil:
		case kerr == nil && errors.As(e, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
			// Another publish with the key remembered it first. An
			// item written to the log has its kept id from the log,
			// which is what subscribers get; one matched to no
			// subscription (not written) takes the remembered id.
			if len(it.Subs) == 0 {
				if e, found, gerr := s.get(ctx, s.idem, idemK(it.IdemKey)); gerr == nil && found {
					kept[i] = string(e.Value())
				}
			}
		default:
			if err == nil {
				err = s.fail(ctx, e, "remember the idempotency key")
			}
			continue
		}
		if kept[i] != it.Entry.GetMessage().GetId() {
			it.Duplicate, it.DuplicateOf = true, kept[i]
		}
		it.Done = true
	}
	return err
}

// firsts reads the message ids remembered for the items' idempotency keys
// (firsts[i] for items[i]; "" if it has none or none is remembered), up
// to 32 reads in flight at once.
func (s *JetStreamStore) firsts(ctx context.Context, items []*Item) ([]string, error) {
	firsts := make([]string, len(items))
	failed := make([]error, len(items))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i, it := range items {
		if it.IdemKey == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			e, found, err := s.get(ctx, s.idem, idemK(it.IdemKey))
			if found {
				firsts[i] = string(e.Value())
			}
			failed[i] = err
		}()
	}
	wg.Wait()
	for _, err := range failed {
		if err != nil {
			return nil, err
		}
	}
	return firsts, nil
}

// FollowQueue implements Store.
func (s *JetStreamStore) FollowQueue(ctx context.Context, id string, f func(QueueEvent)) {
	l := newJSFollower()
	s.followMu.Lock()
	s.followed[id]++
	s.logFollowers[id] = l
	s.followMu.Unlock()
	defer func() {
		s.followMu.Lock()
		if s.followed[id]--; s.followed[id] == 0 {
			delete(s.followed, id)
		}
		if s.logFollowers[id] == l {
			delete(s.logFollowers, id)
		}
		s.followMu.Unlock()
	}()
	b := retry.New(100*time.Millisecond, 5*time.Second, nil)
	for {
		err := s.followQueue(ctx, id, l, f, b)
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("topics: following a queue in JetStream; again", "subscription", id, "err", err)
		if !b.Wait(ctx, nil) {
			return
		}
	}
}

// followQueue follows subscription id's held entries in the queue bucket
// and, once they are read, the messages its consumer delivers, with l the
// messages held (kept across reloads: handed out again after a Reset).
func (s *JetStreamStore) followQueue(ctx context.Context, id string, l *jsFollower, f func(QueueEvent), b *retry.Backoff) error {
	reconn := s.reconnect()
	w, err := s.q.Watch(ctx, enc(id)+".*")
	if err != nil {
		return err
	}
	defer w.Stop()
	var (
		logMsgs chan jetstream.Msg // nil until the held entries are read
		stopped = make(chan struct{})
		cc      jetstream.ConsumeContext
		owner   string // the subscription's topics' owner, once the log is followed
	)
	defer func() {
		close(stopped)
		if cc != nil {
			cc.Stop()
		}
	}()
	startLog := func(live map[string]bool, f func(QueueEvent)) error {
		octx, cancel := s.op(ctx)
		e, found, err := s.get(octx, s.reg, subK(id))
		cancel()
		if err != nil || !found {
			return err // no subscription: held entries only
		}
		rec := &SubscriptionRecord{}
		if err := proto.Unmarshal(e.Value(), rec); err != nil {
			return nil
		}
		p, err := ParsePattern(rec.GetPattern(), "")
		if err != nil {
			return nil
		}
		c, err := s.ensureConsumer(ctx, id, p.Owner)
		if err != nil {
			return err
		}
		owner = p.Owner
		if err := s.reclaim(ctx, id, p.Owner, c, l, live, f); err != nil {
			return err
		}
		ch := make(chan jetstream.Msg, 256)
		cc, err = c.Consume(func(m jetstream.Msg) {
			select {
			case ch <- m:
			case <-stopped:
			}
		}, jetstream.PullMaxMessages(512))
		if err != nil {
			return s.fail(ctx, err, "consume the log of %s", id)
		}
		logMsgs = ch
		return nil
	}
	pre := len(enc(id)) + 1
	initial := map[string]*Entry{}
	var live map[string]bool // the keys present, once loaded
	for {
		var e jetstream.KeyValueEntry
		select {
		case m := <-logMsgs:
			s.onLogMsg(ctx, id, owner, l, live, m, f)
			continue
		case <-l.wake:
			for _, k := range l.takeGone() {
				f(QueueEvent{Key: k})
			}
			continue
		case x, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch ended")
			}
			e = x
		case <-reconn:
			return errors.New("reconnected")
		case <-ctx.Done():
			return ctx.Err()
		}
		if e == nil {
			// Loaded: hand out the queue in its keys' order, which is
			// the log's: the held entries, the log messages held here
			// (kept across reloads), and what reclaim reads from the
			// stream, merged, so that a message reclaimed before the
			// reload does not come after later ones held here.
			b.Reset()
			var out []QueueEvent
			live = make(map[string]bool, len(initial))
			for k, en := range initial {
				live[k] = true
				out = append(out, QueueEvent{Key: k, Entry: en})
			}
			initial = nil
			for _, k := range l.held() {
				l.mu.Lock()
				m := l.msgs[k]
				l.mu.Unlock()
				if m == nil {
					continue
				}
				if e, err := decodeEntry(m.Data()); err == nil {
					out = append(out, QueueEvent{Key: k, Entry: e})
				}
			}
			// Reclaimed messages not settled are handed out again (the
			// Reset dropped them), with what the consumer still holds.
			l.mu.Lock()
			for k, settled := range l.reclaimed {
				if !settled {
					delete(l.reclaimed, k)
				}
			}
			l.mu.Unlock()
			if err := startLog(live, func(ev QueueEvent) { out = append(out, ev) }); err != nil {
				return err
			}
			sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
			f(QueueEvent{Reset: true})
			for _, ev := range out {
				f(ev)
			}
			continue
		}
		key := e.Key()[pre:]
		put := e.Operation() == jetstream.KeyValuePut
		if key == resetKey {
			if live != nil && put {
				live = map[string]bool{}
				l.mu.Lock()
				l.msgs = map[string]jetstream.Msg{}
				l.mu.Unlock()
				f(QueueEvent{Reset: true})
			}
			continue
		}
		var en *Entry
		if put {
			en = &Entry{}
			if err := proto.Unmarshal(e.Value(), en); err != nil {
				s.logger.Warn("topics: an unreadable queued entry, skipped", "subscription", id, "key", key, "err", err)
				continue
			}
		}
		if live == nil {
			if put {
				initial[key] = en
			} else {
				delete(initial, key)
			}
			continue
		}
		if !put {
			if live[key] {
				delete(live, key)
				f(QueueEvent{Key: key})
			}
			continue
		}
		isNew := !live[key]
		live[key] = true
		f(QueueEvent{Key: key, Entry: en, New: isNew})
	}
}

// Ack implements Store: the consumer's Ack of a log message held here, a
// delete marker for a held entry, each sent without waiting for its
// answer, then one round trip to the server that returns once it has
// read them all. An acknowledgement the server lost after that (it died
// before storing it) leaves its message queued: it is delivered again
// (at least once).
func (s *JetStreamStore) Ack(ctx context.Context, acks []AckKey) error {
	n := 0
	for _, a := range acks {
		if !validKey(a.Key) {
			continue
		}
		if l := s.jsFollowerOf(a.Sub); l != nil {
			if lm := l.take(a.Key, true); lm != nil {
				if err := lm.Ack(); err != nil {
					return s.fail(ctx, err, "acknowledge")
				}
				n++
				continue
			}
			if l.settleReclaimed(a.Key, true) {
				continue // acknowledged when the consumer delivers it
			}
		}
		m := &nats.Msg{Subject: s.qSubject(a.Sub, a.Key), Header: nats.Header{"KV-Operation": delOp}}
		if err := s.nc.PublishMsg(m); err != nil {
			return s.fail(ctx, err, "acknowledge")
		}
		n++
	}
	if n == 0 {
		return nil
	}
	octx, cancel := s.op(ctx)
	defer cancel()
	if err := s.nc.FlushWithContext(octx); err != nil {
		return s.fail(ctx, err, "acknowledge")
	}
	s.writes.Add(uint64(n))
	return nil
}

// delOp is a delete marker's KV-Operation header, shared by all.
var delOp = []string{"DEL"}

// Update implements Store.
func (s *JetStreamStore) Update(ctx context.Context, id, key string, e *Entry) error {
	if !validKey(key) {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	if l := s.jsFollowerOf(id); l != nil {
		l.mu.Lock()
		m := l.msgs[key]
		l.mu.Unlock()
		if m == nil && l.isReclaimed(key) {
			// Handed out from the stream (see reclaim): held apart from
			// now on, and its delivery by the consumer acknowledged.
			seq, err := strconv.ParseUint(key, 16, 64)
			if err != nil {
				return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
			}
			b, err := encodeHeld(e, int64(seq))
			if err != nil {
				return err
			}
			if _, err := s.put(ctx, s.q, itemK(id, key), b); err != nil {
				return err
			}
			l.settleReclaimed(key, false)
			return nil
		}
		if m != nil {
			// Held apart from the log from now on, at its place.
			b, err := encodeHeld(e, int64(seqOf(m)))
			if err != nil {
				return err
			}
			if _, err := s.put(ctx, s.q, itemK(id, key), b); err != nil {
				return err
			}
			if m := l.take(key, false); m != nil {
				if err := m.Ack(); err != nil {
					return s.fail(ctx, err, "acknowledge")
				}
				s.writes.Add(1)
			}
			return nil
		}
	}
	b, err := proto.Marshal(e)
	if err != nil {
		return errs.New(codes.Internal, "update: %w", err)
	}
	for range 16 {
		cur, found, err := s.get(ctx, s.q, itemK(id, key))
		if err != nil {
			return err
		}
		if !found {
			return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
		}
		octx, cancel := s.op(ctx)
		_, err = s.q.Update(octx, itemK(id, key), b, cur.Revision())
		cancel()
		if err == nil {
			s.writes.Add(1)
			return nil
		}
		var apiErr *jetstream.APIError
		if !errors.Is(err, jetstream.ErrKeyExists) && !(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
			return s.fail(ctx, err, "update %s %s", id, key)
		}
	}
	return errs.New(codes.Aborted, "update %s %s: too many concurrent changes; retry", id, key)
}

// Kill implements Store.
func (s *JetStreamStore) Kill(ctx context.Context, id, key string, d *DeadLetter) error {
	if !validKey(key) {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	d = proto.Clone(d).(*DeadLetter)
	d.Id = key
	b, err := proto.Marshal(d)
	if err != nil {
		return errs.New(codes.Internal, "dead letter: %w", err)
	}
	if l := s.jsFollowerOf(id); l != nil {
		l.mu.Lock()
		m := l.msgs[key]
		l.mu.Unlock()
		if m == nil && l.isReclaimed(key) {
			if _, err := s.put(ctx, s.dead, itemK(id, key), b); err != nil {
				return err
			}
			l.settleReclaimed(key, true)
			return nil
		}
		if m != nil {
			if _, err := s.put(ctx, s.dead, itemK(id, key), b); err != nil {
				return err
			}
			if m := l.take(key, true); m != nil {
				if err := m.Ack(); err != nil {
					return s.fail(ctx, err, "acknowledge")
				}
				s.writes.Add(1)
			}
			return nil
		}
	}
	_, found, err := s.get(ctx, s.q, itemK(id, key))
	if err != nil {
		return err
	}
	if !found {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	if _, err := s.put(ctx, s.dead, itemK(id, key), b); err != nil {
		return err
	}
	return s.del(ctx, s.q, itemK(id, key))
}

// SetFull implements Store.
func (s *JetStreamStore) SetFull(ctx context.Context, id string, full bool) error {
	if _, found, err := s.get(ctx, s.reg, subK(id)); err != nil || !found {
		return err
	}
	_, is, err := s.get(ctx, s.reg, fullK(id))
	if err != nil || is == full {
		return err
	}
	if full {
		_, err = s.put(ctx, s.reg, fullK(id), nil)
		return err
	}
	return s.del(ctx, s.reg, fullK(id))
}

// deadLetters reads subscription id's dead letters, by key.
func (s *JetStreamStore) deadLetters(ctx context.Context, id string) ([]*DeadLetter, error) {
	es, err := s.list(ctx, s.dead, enc(id)+".*", false)
	if err != nil {
		return nil, err
	}
	out := make([]*DeadLetter, 0, len(es))
	for _, e := range es {
		d := &DeadLetter{}
		if err := proto.Unmarshal(e.Value(), d); err != nil {
			continue
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out, nil
}

// DeadLetters implements Store. It reads all of the subscription's dead
// letters for each page: a subscription's dead letters are meant to be
// few, looked at, replayed or dropped.
func (s *JetStreamStore) DeadLetters(ctx context.Context, id, after string, limit int) ([]*DeadLetter, bool, error) {
	all, err := s.deadLetters(ctx, id)
	if err != nil {
		return nil, false, err
	}
	var out []*DeadLetter
	for _, d := range all {
		if d.GetId() <= after {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, d)
	}
	return out, false, nil
}

// chosen returns the dead letters of id named by keys (nil: all).
func (s *JetStreamStore) chosen(ctx context.Context, id string, keys []string) ([]*DeadLetter, error) {
	all, err := s.deadLetters(ctx, id)
	if err != nil || keys == nil {
		return all, err
	}
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	var out []*DeadLetter
	for _, d := range all {
		if want[d.GetId()] {
			out = append(out, d)
		}
	}
	return out, nil
}

func (s *JetStreamStore) dropDead(ctx context.Context, id, key string) error {
	octx, cancel := s.op(ctx)
	defer cancel()
	if err := s.deadStream.Purge(octx, jetstream.WithPurgeSubject("$KV."+s.cfg.Bucket+"_dead."+itemK(id, key))); err != nil {
		return s.fail(ctx, err, "drop the dead letter %s of %s", key, id)
	}
	s.writes.Add(1)
	return nil
}

// Replay implements Store.
func (s *JetStreamStore) Replay(ctx context.Context, id string, keys []string) (int, error) {
	ds, err := s.chosen(ctx, id, keys)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range ds {
		b, err := proto.Marshal(&Entry{Message: d.GetMessage()})
		if err != nil {
			return n, errs.New(codes.Internal, "replay: %w", err)
		}
		if _, err := s.put(ctx, s.q, itemK(id, s.newKey()), b); err != nil {
			return n, err
		}
		if err := s.dropDead(ctx, id, d.GetId()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Drop implements Store.
func (s *JetStreamStore) Drop(ctx context.Context, id string, keys []string) (int, error) {
	ds, err := s.chosen(ctx, id, keys)
	if err != nil {
		return 0, err
	}
	for i, d := range ds {
		if err := s.dropDead(ctx, id, d.GetId()); err != nil {
			return i, err
		}
	}
	return len(ds), nil
}

// onLogMsg takes a message the consumer of subscription id (of owner's
// topics) delivered: one not naming id, or held apart already (live: the
// held entries), is acknowledged at once; one held already (a delivery
// again after AckWait) replaces the one held; a new one is handed out,
// after those the consumer gave another store meanwhile (fillGap).
func (s *JetStreamStore) onLogMsg(ctx context.Context, id, owner string, l *jsFollower, live map[string]bool, m jetstream.Msg, f func(QueueEvent)) {
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
		s.fillGap(ctx, id, owner, l, live, seq, md.Sequence.Consumer, f)
	}
	key := logKey(seq)
	if seq == 0 || !recordNames(m.Data(), id) || live[key] {
		if err := m.Ack(); err == nil {
			s.writes.Add(1)
		}
		return
	}
	l.mu.Lock()
	if settled, ok := l.reclaimed[key]; ok {
		// Handed out from the stream already (see reclaim).
		delete(l.reclaimed, key)
		if !settled {
			l.msgs[key] = m // its settling acknowledges it
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if err := m.Ack(); err == nil {
			s.writes.Add(1)
		}
		return
	}
	_, again := l.msgs[key]
	l.msgs[key] = m
	l.mu.Unlock()
	if again {
		return
	}
	e, err := s.decoded.decode(seq, m.Data())
	if err != nil {
		s.logger.Warn("topics: an unreadable log message, skipped", "subscription", id, "key", key, "err", err)
		l.take(key, false)
		_ = m.Ack()
		return
	}
	f(QueueEvent{Key: key, Entry: e, New: true})
}
