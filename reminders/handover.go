package reminders

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
)

// Hand-over. A silo that takes a bucket over from a silo still up (one
// leaving gracefully, or one whose bucket moved to a silo that joined) asks
// that silo for the bucket (Config.Fetch, answered by Export there) instead
// of reading it from etcd, where every reminder costs a key read and a
// decoding: the work of a view change is then one message per bucket that
// moved.
//
// What Export sends is the bucket's state at the etcd revision its watch
// had reached (with any of the sender's own writes after it). The taker
// applies it as it applies a load from etcd at that revision, and its watch
// resumes from the revision after it, so that nothing written meanwhile is
// missed; the catch-up rules of a takeover (Rebalance's lostAt) are the
// same. Whatever goes wrong (the old owner gone or no longer holding the
// bucket, an answer that does not decode, the watch's history compacted)
// falls back to etcd: the hand-over saves work, it decides nothing.

// partedFor is how long a Service keeps a bucket it let go of for the
// silo that took it over to fetch (see Export): past it, that silo reads
// the bucket from etcd.
const partedFor = 10 * time.Second

// handOverFormat is the first byte of Export's encoding.
const handOverFormat = 1

// maxHandOver bounds Export's encoding: a bucket larger than this (large
// payloads) is read from etcd by its taker, as before hand-overs.
const maxHandOver = 3 << 20

// errNotHeld is Export's answer for a bucket it cannot hand over.
func errNotHeld(b int) error {
	return errs.New(codes.NotFound, "reminder bucket %d is not held here", b)
}

// Export returns bucket b's reminders as this Service knows them, encoded
// for the Config.Fetch of the silo taking the bucket over: from a bucket it
// holds and has loaded, or one it let go of in the last partedFor (once:
// a bucket let go of is exported to one taker). NotFound if it has neither;
// InvalidArgument for a b out of range.
func (s *Service) Export(b int) ([]byte, error) {
	if b < 0 || b >= Buckets {
		return nil, errs.New(codes.InvalidArgument, "reminder bucket %d: want 0 to %d", b, Buckets-1)
	}
	s.mu.Lock()
	bk := s.buckets[b]
	if bk == nil || !bk.loaded || bk.reload {
		bk = s.parted[b]
		if bk != nil {
			delete(s.parted, b)
			s.notifyLocked() // HandedOver
		}
	}
	if bk == nil {
		s.mu.Unlock()
		return nil, errNotHeld(b)
	}
	if s.buckets[b] == bk {
		bk.exported = true // its taker has it: not kept once let go of
	}
	// Encoded under the lock (a bucket's worth of appends), without a copy.
	prefix := len(s.keys.bucket(b))
	out := make([]byte, 0, 16+len(bk.entries)*96)
	out = append(out, handOverFormat)
	out = binary.AppendUvarint(out, uint64(b))
	out = binary.AppendUvarint(out, uint64(bk.seen))
	out = binary.AppendUvarint(out, uint64(len(bk.entries)))
	for k, e := range bk.entries {
		out = appendString(out, k[prefix:])
		out = binary.AppendUvarint(out, uint64(e.rev))
		out = binary.AppendUvarint(out, uint64(e.r.Period.Milliseconds()))
		out = binary.AppendVarint(out, e.r.Due.UnixMilli())
		out = appendString(out, e.r.MessageType)
		out = appendString(out, e.r.Message)
		if len(out) > maxHandOver {
			s.mu.Unlock()
			return nil, errs.New(codes.ResourceExhausted, "reminder bucket %d is over %d bytes: its taker reads it from etcd", b, maxHandOver)
		}
	}
	s.mu.Unlock()
	return out, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeHandOver reads Export's encoding of bucket b: the reminders and the
// etcd revision their state is at. Any flaw fails the whole: the taker
// reads the bucket from etcd instead.
func (s *Service) decodeHandOver(b int, p []byte) (list []entry, seen int64, err error) {
	bad := func(what string) error { return fmt.Errorf("reminders: hand-over of bucket %d: %s", b, what) }
	if len(p) == 0 || p[0] != handOverFormat {
		return nil, 0, bad("unknown format")
	}
	p = p[1:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	str := func() (string, bool) {
		n, ok := uv()
		if !ok || n > uint64(len(p)) {
			return "", false
		}
		v := string(p[:n])
		p = p[n:]
		return v, true
	}
	nb, ok1 := uv()
	rev, ok2 := uv()
	count, ok3 := uv()
	if !ok1 || !ok2 || !ok3 || nb != uint64(b) || rev > math.MaxInt64 {
		return nil, 0, bad("bad header")
	}
	// Each reminder takes at least 6 bytes: a count the bytes cannot hold
	// is refused before anything is made for it.
	if count > uint64(len(p))/6 {
		return nil, 0, bad("count over its bytes")
	}
	prefix := s.keys.bucket(b)
	list = make([]entry, 0, count) // one allocation for the bucket's entries
	for range count {
		rest, ok := str()
		if !ok {
			return nil, 0, bad("bad key")
		}
		key := prefix + rest
		kb, addr, name, err := s.keys.parse(key)
		if err != nil || kb != b {
			return nil, 0, bad(fmt.Sprintf("key %q", key))
		}
		mrev, ok1 := uv()
		period, ok2 := uv()
		due, n := binary.Varint(p)
		if !ok1 || !ok2 || n <= 0 || mrev > math.MaxInt64 || period == 0 || period > uint64(math.MaxInt64/time.Millisecond) {
			return nil, 0, bad(fmt.Sprintf("reminder %q", key))
		}
		p = p[n:]
		mt, ok1 := str()
		msg, ok2 := str()
		if !ok1 || !ok2 {
			return nil, 0, bad(fmt.Sprintf("reminder %q", key))
		}
		list = append(list, entry{key: key, addr: addr, rev: int64(mrev), idx: -1, r: grain.Reminder{
			Name: name, Period: time.Duration(period) * time.Millisecond,
			MessageType: mt, Message: msg, Due: time.UnixMilli(due),
		}})
	}
	if len(p) != 0 {
		return nil, 0, bad("trailing bytes")
	}
	return list, int64(rev), nil
}

// fetchBucket loads bk, a bucket not loaded yet, from the silo that held
// it before (Config.Fetch). It reports whether it did; if not, bk is read
// from etcd.
func (s *Service) fetchBucket(r *run, bk *bucket) bool {
	if s.cfg.Fetch == nil {
		return false
	}
	select { // a bounded number of fetches at once
	case s.fetches <- struct{}{}:
	case <-r.ctx.Done():
		return false
	}
	ctx, cancel := context.WithTimeout(r.ctx, s.cfg.OpTimeout)
	data, err := s.cfg.Fetch(ctx, bk.n)
	cancel()
	<-s.fetches
	if err != nil {
		if errs.Code(err) != codes.NotFound {
			s.cfg.Logger.Debug("reminders: bucket not handed over; reading it from etcd", "bucket", bk.n, "err", err)
		}
		return false
	}
	list, seen, err := s.decodeHandOver(bk.n, data)
	if err != nil {
		s.cfg.Logger.Warn("reminders: bucket handed over unreadable; reading it from etcd", "bucket", bk.n, "err", err)
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.holds(bk) || !s.current(r) || bk.loaded {
		return false
	}
	now := s.cfg.clk.Now()
	// What the bucket holds already (Register's writes while it was not
	// loaded; usually nothing) stays if the hand-over has it, or is newer.
	var keep map[string]struct{}
	if len(bk.entries) == 0 {
		bk.entries = make(map[string]*entry, len(list))
	} else {
		keep = make(map[string]struct{}, len(list))
		for i := range list {
			keep[list[i].key] = struct{}{}
		}
	}
	for i := range list {
		l := &list[i]
		if bk.entries[l.key] != nil || bk.tombs[l.key] >= l.rev {
			s.putLocked(bk, l.key, l.addr, l.r, l.rev, bk.lostAt, now, false)
			continue
		}
		// What putLocked does for a key the bucket does not hold, with
		// the entry decoded in place.
		l.b = bk
		bk.entries[l.key] = l
		s.count++
		s.scheduleLocked(l, now, bk.lostAt)
	}
	s.loadedLocked(bk, keep, seen)
	s.fetched.Add(1)
	return true
}

// partLocked keeps bk, a bucket just let go of by View version, for its
// taker to fetch (partedFor at most). s.mu is held.
func (s *Service) partLocked(bk *bucket, version int64) {
	if s.cfg.Fetch == nil || !bk.loaded || bk.reload || bk.exported || s.ctx.Err() != nil {
		return
	}
	bk.partedIn = version
	if s.parted == nil {
		s.parted = make(map[int]*bucket)
	}
	s.parted[bk.n] = bk
	var t clock.Timer
	t = s.cfg.clk.AfterFunc(partedFor, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.timers, t)
		if s.parted[bk.n] == bk {
			delete(s.parted, bk.n)
			s.notifyLocked()
		}
	})
	if s.timers == nil {
		s.timers = make(map[clock.Timer]struct{})
	}
	s.timers[t] = struct{}{}
}

// HandedOver returns once the Service holds no bucket and every bucket the
// view that took the last ones away let go of was fetched by its taker (or
// dropped after partedFor), or with ctx's error. A silo leaving gracefully
// calls it, bounded, before Close, so that the silos taking its buckets
// over read them from it, not from etcd.
func (s *Service) HandedOver(ctx context.Context) error {
	return s.waitUntil(ctx, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, bk := range s.parted {
			if bk.partedIn == s.version {
				return false
			}
		}
		return s.held == 0
	})
}
