package reminders

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/retry"
)

func prefixOpt(prefix string) []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))}
}

// errCompacted: the revision to resume from is gone; read everything again.
var errCompacted = errors.New("reminders: watch revision compacted")

// sync keeps the Service's reminders in step with etcd: it loads them all
// (in pages, at one revision), then watches the prefix from that revision on,
// resuming the watch after errors and loading again if etcd compacted the
// history the watch needed. It retries with backoff while etcd is away.
func (s *Service) sync() {
	defer s.wg.Done()
	first := true
	// Retries run on real time: they are not part of the schedule.
	b := retry.New(100*time.Millisecond, 5*time.Second, nil)
	for s.ctx.Err() == nil {
		catchUp := s.cfg.Clock.Now() // a reload fires nothing that is not due
		if first {
			catchUp = time.Time{} // a start fires once what was missed while down
		}
		rev, err := s.load(catchUp)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.cfg.Logger.Warn("reminders: loading from etcd failed; retrying", "err", etcderr.Wrap(err))
			if !b.Wait(s.ctx, nil) {
				return
			}
			continue
		}
		if first {
			close(s.loaded)
			first = false
		}
		b.Reset()
		from := rev + 1
		for s.ctx.Err() == nil {
			from, err = s.watch(from)
			if errors.Is(err, errCompacted) || s.ctx.Err() != nil {
				break
			}
			s.cfg.Logger.Warn("reminders: watching etcd failed; resuming", "err", etcderr.Wrap(err), "from_revision", from)
			if !b.Wait(s.ctx, nil) {
				return
			}
		}
	}
}

// load reads every reminder at one revision, page by page, and returns that
// revision. Register and Unregister go on meanwhile: revisions decide which
// state of a key wins.
func (s *Service) load(catchUpAfter time.Time) (int64, error) {
	var (
		rev  int64
		key  = s.keys.root
		end  = clientv3.GetPrefixRangeEnd(s.keys.root)
		seen = make(map[string]struct{})
	)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(s.cfg.PageSize))}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.OpTimeout)
		resp, err := s.cfg.Client.Get(ctx, key, opts...)
		cancel()
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		s.mu.Lock()
		now := s.cfg.Clock.Now()
		head := false
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			seen[k] = struct{}{}
			addr, name, err := s.keys.parse(k)
			if err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable key", "key", k, "err", err)
				continue
			}
			r, err := decode(name, kv.Value)
			if err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable reminder", "key", k, "err", err)
				continue
			}
			if s.putLocked(k, addr, r, kv.ModRevision, catchUpAfter, now) {
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
	// Keys deleted up to rev and not seen are gone; tombstones up to rev
	// have done their work.
	s.mu.Lock()
	for k, e := range s.entries {
		if _, ok := seen[k]; !ok && e.rev <= rev {
			s.deleteLocked(k, rev, false)
		}
	}
	for k, t := range s.tombs {
		if t <= rev {
			delete(s.tombs, k)
		}
	}
	s.mu.Unlock()
	s.poke()
	return rev, nil
}

// watch applies the changes under the prefix from revision from on, until
// the watch fails; it returns the revision to resume from.
func (s *Service) watch(from int64) (int64, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer cancel()
	wch := s.cfg.Client.Watch(ctx, s.keys.root, clientv3.WithPrefix(), clientv3.WithRev(from))
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return from, errCompacted
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return from, errCompacted
			}
			return from, err
		}
		s.mu.Lock()
		now := s.cfg.Clock.Now()
		head := false
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			rev := ev.Kv.ModRevision
			if ev.Type == mvccpb.DELETE {
				s.deleteLocked(k, rev, false)
			} else if addr, name, err := s.keys.parse(k); err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable key", "key", k, "err", err)
			} else if r, err := decode(name, ev.Kv.Value); err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable reminder", "key", k, "err", err)
			} else if s.putLocked(k, addr, r, rev, now, now) {
				head = true
			}
			if t, ok := s.tombs[k]; ok && t <= rev {
				delete(s.tombs, k)
			}
		}
		s.mu.Unlock()
		if head {
			s.poke()
		}
		if n := len(resp.Events); n > 0 {
			from = resp.Events[n-1].Kv.ModRevision + 1
		}
	}
	if err := s.ctx.Err(); err != nil {
		return from, err
	}
	return from, errors.New("reminders: watch closed")
}
