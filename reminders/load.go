package reminders

import (
	"context"
	"errors"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/grain"
)

func prefixOpt(prefix string) []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))}
}

// errCompacted: the revision to resume from is gone; read everything again.
var errCompacted = errors.New("reminders: watch revision compacted")

// loadedKV is one reminder of a page read, decoded.
type loadedKV struct {
	key  string
	addr grain.Address
	r    grain.Reminder
	rev  int64
}

// loadBucket reads bk's reminders at one revision, page by page, and sets
// bk.seen to that revision. Register and Unregister go on meanwhile:
// revisions decide which state of a key wins. Nothing is recorded once bk is
// let go. A first load fires once the ticks after bk.lostAt not fired; a
// reload (after a compaction) fires nothing that is not due.
func (s *Service) loadBucket(r *run, bk *bucket) error {
	ctx := r.ctx
	var (
		rev    int64
		prefix = s.keys.bucket(bk.n)
		key    = prefix
		end    = clientv3.GetPrefixRangeEnd(prefix)
		seen   = make(map[string]struct{})
		page   []loadedKV
	)
	s.mu.Lock()
	catchUpAfter, first := bk.lostAt, !bk.loaded
	if bk.loaded {
		catchUpAfter = s.cfg.clk.Now()
	}
	s.mu.Unlock()
	if first && s.fetchBucket(r, bk) {
		return nil
	}
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(s.cfg.PageSize))}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		select { // a bounded number of loads at once, so as not to flood etcd
		case s.loads <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		octx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		resp, err := s.cfg.Client.Get(octx, key, opts...)
		cancel()
		<-s.loads
		if err != nil {
			return err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		// The page is decoded before the lock is taken: firing, Register
		// and the other buckets' loads wait only for the puts.
		page = slices.Grow(page[:0], len(resp.Kvs))
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			seen[k] = struct{}{}
			_, addr, name, err := s.keys.parse(k)
			if err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable key", "key", k, "err", err)
				continue
			}
			r, err := decode(name, kv.Value)
			if err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable reminder", "key", k, "err", err)
				continue
			}
			page = append(page, loadedKV{key: k, addr: addr, r: r, rev: kv.ModRevision})
		}
		s.mu.Lock()
		if !s.holds(bk) || !s.current(r) {
			s.mu.Unlock()
			return context.Canceled
		}
		now := s.cfg.clk.Now()
		head := false
		for i := range page {
			l := &page[i]
			if s.putLocked(bk, l.key, l.addr, l.r, l.rev, catchUpAfter, now, false) {
				head = true
			}
		}
		s.mu.Unlock()
		if head {
			s.poke()
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.holds(bk) || !s.current(r) {
		return context.Canceled
	}
	s.loadedLocked(bk, seen, rev)
	if first {
		s.read.Add(1)
	}
	return nil
}

// loadedLocked ends a load of bk at revision rev, which read the keys in
// seen: keys deleted up to rev and not seen are gone (a reload; nil seen:
// the bucket held nothing else), and tombstones up to rev have done their
// work.
// s.mu is held.
func (s *Service) loadedLocked(bk *bucket, seen map[string]struct{}, rev int64) {
	if seen != nil {
		for k, e := range bk.entries {
			if _, ok := seen[k]; !ok && e.rev <= rev {
				s.deleteLocked(bk, k, rev, false)
			}
		}
	}
	for k, t := range bk.tombs {
		if t <= rev {
			delete(bk.tombs, k)
		}
	}
	bk.seen, bk.reload = max(bk.seen, rev), false
	if !bk.loaded {
		bk.loaded = true
		s.loading--
		s.notifyLocked()
		s.markLoadedLocked()
	}
	s.poke()
}

// watchRange applies the changes to r's buckets from revision from on,
// until the watch fails or r ends; it returns the revision to resume from.
// Each event is applied once, to the bucket of its key if it is held and
// loaded, and only if newer than what that bucket has seen (a bucket
// carried over from a replaced run may have seen it already).
func (s *Service) watchRange(r *run, from int64) (int64, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(r.ctx))
	defer cancel()
	start, end := s.keys.bucket(r.lo), clientv3.GetPrefixRangeEnd(s.keys.bucket(r.hi))
	wch := s.cfg.Client.Watch(ctx, start, clientv3.WithRange(end), clientv3.WithRev(from), clientv3.WithProgressNotify())
	for resp := range wch {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return from, errCompacted
		}
		if err := resp.Err(); err != nil {
			return from, err
		}
		s.mu.Lock()
		if !s.current(r) { // replaced: the new run applies what follows
			s.mu.Unlock()
			return from, context.Canceled
		}
		now := s.cfg.clk.Now()
		head := false
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			rev := ev.Kv.ModRevision
			n, addr, name, err := s.keys.parse(k)
			if err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable key", "key", k, "err", err)
				continue
			}
			bk := s.buckets[n]
			if bk == nil || !bk.loaded || rev <= bk.seen {
				continue
			}
			bk.seen = rev
			if ev.Type == mvccpb.DELETE {
				s.deleteLocked(bk, k, rev, false)
			} else if r, err := decode(name, ev.Kv.Value); err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable reminder", "key", k, "err", err)
			} else if s.putLocked(bk, k, addr, r, rev, now, now, true) {
				head = true
			}
			if t, ok := bk.tombs[k]; ok && t <= rev {
				delete(bk.tombs, k)
			}
		}
		// The watch has delivered every event of the range up to the last
		// one (or, in a progress notice, up to the header's revision):
		// each loaded bucket of r has seen them, so that a run replacing r
		// resumes from there, not from a quiet bucket's load (which etcd
		// may have compacted since).
		var upTo int64
		if n := len(resp.Events); n > 0 {
			upTo = resp.Events[n-1].Kv.ModRevision
		} else if resp.IsProgressNotify() {
			upTo = resp.Header.Revision
		}
		for n := r.lo; n <= r.hi && upTo > 0; n++ {
			if bk := s.buckets[n]; bk != nil && bk.loaded && bk.seen < upTo {
				bk.seen = upTo
			}
		}
		s.mu.Unlock()
		if head {
			s.poke()
		}
		if upTo >= from {
			from = upTo + 1
		}
	}
	if err := r.ctx.Err(); err != nil {
		return from, err
	}
	return from, errors.New("reminders: watch closed")
}
