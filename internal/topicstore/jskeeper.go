package topicstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// watchStatus closes reconnected at each reconnection.
func (s *JetStreamStore) watchStatus(ctx context.Context, status <-chan nats.Status) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-status:
		}
		s.reconnMu.Lock()
		close(s.reconnected)
		s.reconnected = make(chan struct{})
		s.reconnMu.Unlock()
	}
}

func (s *JetStreamStore) reconnect() <-chan struct{} {
	s.reconnMu.Lock()
	defer s.reconnMu.Unlock()
	return s.reconnected
}

// keeper puts this store's heartbeat every third of SessionTTL (and its
// session members again if the heartbeat had expired), and deletes, every
// SessionTTL, the session members whose holder's heartbeat has expired.
func (s *JetStreamStore) keeper(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SessionTTL / 3)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.beat(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("topics: the JetStream store's heartbeat", "err", err)
		}
		if n%3 == 0 {
			if err := s.expireSessions(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("topics: removing the members of expired sessions from JetStream", "err", err)
			}
		}
	}
}

// beat puts the heartbeat; if it had expired, it puts the held session
// members again (another store may have deleted them meanwhile).
func (s *JetStreamStore) beat(ctx context.Context) error {
	_, alive, err := s.get(ctx, s.live, s.keySuffix)
	if err != nil {
		return err
	}
	if _, err := s.put(ctx, s.live, s.keySuffix, nil); err != nil {
		return err
	}
	if alive {
		return nil
	}
	s.heldMu.Lock()
	keys := make([]string, 0, len(s.held))
	for k := range s.held {
		keys = append(keys, k)
	}
	s.heldMu.Unlock()
	for _, k := range keys {
		if _, err := s.put(ctx, s.reg, k, []byte(holderPrefix+s.keySuffix)); err != nil {
			return err
		}
	}
	return nil
}

// expireSessions deletes the session members whose holder's heartbeat has
// expired.
func (s *JetStreamStore) expireSessions(ctx context.Context) error {
	es, err := s.list(ctx, s.reg, "m.*.*", false)
	if err != nil {
		return err
	}
	alive := map[string]bool{}
	for _, e := range es {
		h, ok := strings.CutPrefix(string(e.Value()), holderPrefix)
		if !ok {
			continue
		}
		a, known := alive[h]
		if !known {
			_, a, err = s.get(ctx, s.live, h)
			if err != nil {
				return err
			}
			alive[h] = a
		}
		if !a {
			// Unless its holder put it again meanwhile.
			octx, cancel := s.op(ctx)
			err := s.reg.Delete(octx, e.Key(), jetstream.LastRevision(e.Revision()))
			cancel()
			var apiErr *jetstream.APIError
			if err != nil && !(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
				return s.fail(ctx, err, "delete %s", e.Key())
			}
		}
	}
	return nil
}

// sweeper removes, every SweepEvery, the delete markers of acknowledged
// entries older than MarkerAge in the queues followed here: each queue's
// by the silo that delivers it, not by every silo.
func (s *JetStreamStore) sweeper(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.followMu.Lock()
		ids := make([]string, 0, len(s.followed))
		for id := range s.followed {
			ids = append(ids, id)
		}
		s.followMu.Unlock()
		for _, id := range ids {
			if err := s.sweep(ctx, id); err != nil && ctx.Err() == nil {
				s.logger.Warn("topics: removing acknowledged entries' markers from JetStream", "subscription", id, "err", err)
			}
		}
	}
}

// sweep removes the delete markers of subscription id's queue older than
// MarkerAge.
func (s *JetStreamStore) sweep(ctx context.Context, id string) error {
	octx, cancel := s.op(ctx)
	defer cancel()
	w, err := s.q.Watch(octx, enc(id)+".*", jetstream.MetaOnly())
	if err != nil {
		return s.fail(ctx, err, "list the markers of %s", id)
	}
	defer w.Stop()
	var old []string
	limit := time.Now().Add(-s.cfg.MarkerAge)
	for done := false; !done; {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return s.fail(ctx, errors.New("the listing ended early"), "list the markers of %s", id)
			case e == nil:
				done = true
			case e.Operation() != jetstream.KeyValuePut && !e.Created().After(limit):
				old = append(old, e.Key())
			}
		case <-octx.Done():
			return s.fail(ctx, octx.Err(), "list the markers of %s", id)
		}
	}
	for _, k := range old {
		if err := s.qStream.Purge(octx, jetstream.WithPurgeSubject("$KV."+s.cfg.Bucket+"_q."+k)); err != nil {
			return s.fail(ctx, err, "remove the marker %s", k)
		}
	}
	return nil
}
