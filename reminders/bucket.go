package reminders

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// Buckets is the number of buckets the reminders are stored in. An agent's
// reminders all live in its bucket, Bucket(addr); a silo loads, watches and
// fires only the buckets it owns. It is part of the stored format (the
// bucket is in every key): it never changes.
const Buckets = 1024

// Bucket returns the bucket of addr's reminders: FNV-1a 32 of the address's
// canonical form (Type:owner:alias), modulo Buckets. It never changes
// (bucket_test.go pins it).
func Bucket(addr grain.Address) int { return bucketOf(addr.String()) }

func bucketOf(addr string) int {
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	for i := 0; i < len(addr); i++ {
		h ^= uint32(addr[i])
		h *= prime32
	}
	return int(h % Buckets)
}

// bucketNames are the buckets' four-digit names, in keys; placeNames are
// BucketName's.
var bucketNames, placeNames = func() (n, p [Buckets]string) {
	for b := range n {
		n[b] = fmt.Sprintf("%04d", b)
		p[b] = "reminders/" + n[b]
	}
	return n, p
}()

// BucketName returns the name a cluster places bucket b by, as it places
// an agent by its address: "reminders/0042". It is no agent address (it has
// no colon), and never changes.
func BucketName(b int) string { return placeNames[b] }

// View is one membership view as a Service sees it: which buckets this silo
// owns in it. Ownership is always evaluated against one View: the buckets a
// Service holds are those its newest applied View owns, and a tick fires
// only if the View in force (Config.View) owns its bucket too.
type View struct {
	// Version orders views; equal versions are the same view.
	Version int64
	// Owns reports whether this silo owns bucket b in this view. It is
	// called concurrently, and must be quick (a cached answer per bucket).
	Owns func(b int) bool
}

// bucket is one bucket this Service holds: its reminders, loaded by the
// goroutine of the run of held buckets it is in, and kept in step by that
// run's watch.
type bucket struct {
	n        int
	version  int64             // the View by which it is held
	entries  map[string]*entry // by etcd key
	tombs    map[string]int64  // key -> revision of a local delete not yet seen by the watch
	lostAt   time.Time         // for its first load: see Rebalance
	loaded   bool              // loaded once: its ticks fire
	reload   bool              // to load again (its watch's history was compacted)
	seen     int64             // the etcd revision its state is at: watch events up to it are applied
	parked   bool              // due took some entries off the heap: the view in force did not own it
	exported bool              // handed over while held (see Export)
	partedIn int64             // the View that took it away, once let go of
}

// run is a range of consecutive buckets held, [lo, hi]: one goroutine loads
// the ones not loaded, then watches the whole range with one etcd watch (a
// single silo holds one run; a silo of N holds about Buckets/N of them, in
// fewer runs). A run is replaced when the buckets held change within or
// next to it; its buckets keep what they loaded, and the new run's watch
// resumes from the oldest revision they have seen.
type run struct {
	lo, hi int
	ctx    context.Context
	cancel context.CancelFunc
}

// Rebalance tells the Service the view in force (Config.View) changed. It
// returns at once: the Service's own goroutine takes the buckets the new
// view gives it (loading and watching each) and lets go of those it lost,
// at a cost in proportion to what moved. A reminder taken over fires once
// at once if one of its ticks fell after lostAt (when the old owner may
// have stopped firing: its failure, or for a graceful hand-over the time of
// the hand-over, so nothing fires twice), then on schedule. Calls that come
// while the Service is busy are applied together, with the earliest lostAt.
// Meanwhile nothing fires whose bucket the view in force does not own.
func (s *Service) Rebalance(lostAt time.Time) {
	s.pmu.Lock()
	if !s.pending || lostAt.Before(s.lostAt) {
		s.lostAt = lostAt
	}
	s.pending = true
	s.pmu.Unlock()
	select {
	case s.rebal <- struct{}{}:
	default:
	}
}

// Settled returns once the Service has applied the last Rebalance and
// loaded every bucket it holds, or with ctx's error.
func (s *Service) Settled(ctx context.Context) error {
	return s.waitUntil(ctx, func() bool {
		// Busy first: a Rebalance applied by then has counted the buckets
		// it gained in loading (read after), which it does before it is
		// no longer applying. The other way round, a count read just
		// before an apply would pass once that apply ended.
		s.pmu.Lock()
		busy := s.pending || s.applying
		s.pmu.Unlock()
		s.mu.Lock()
		loading := s.loading
		s.mu.Unlock()
		return !busy && loading == 0
	})
}

// waitUntil returns once done reports true, asked now and again each time
// the Service's state changes (notifyLocked), or with ctx's error.
func (s *Service) waitUntil(ctx context.Context, done func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if done() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return errClosed()
		}
	}
}

// ownsAll is the view of a single silo.
var ownsAll = View{Owns: func(int) bool { return true }}

func (s *Service) view() View {
	if s.cfg.View == nil {
		return ownsAll
	}
	return s.cfg.View()
}

// follow applies the views given by Rebalance, one at a time.
func (s *Service) follow() {
	defer s.wg.Done()
	owns := make([]bool, Buckets)
	for {
		select {
		case <-s.rebal:
		case <-s.stop:
			return
		}
		s.pmu.Lock()
		if !s.pending {
			s.pmu.Unlock()
			continue
		}
		lostAt := s.lostAt
		s.pending, s.applying = false, true
		s.pmu.Unlock()
		s.apply(s.view(), lostAt, owns)
		s.pmu.Lock()
		s.applying = false
		s.pmu.Unlock()
		s.mu.Lock()
		s.notifyLocked()
		s.mu.Unlock()
	}
}

// apply makes the buckets held those v owns: it starts loading the ones
// gained (their ticks after lostAt not yet fired fire once) and lets go of
// the ones lost. Its work is one ownership answer per bucket, plus the
// reminders of the buckets that moved.
func (s *Service) apply(v View, lostAt time.Time, owns []bool) {
	for b := range owns {
		owns[b] = v.Owns(b)
	}
	var lost []*bucket
	var started []*run
	s.mu.Lock()
	now := s.cfg.clk.Now()
	changed := false
	for b, own := range owns {
		bk := s.buckets[b]
		switch {
		case own && bk == nil:
			bk = &bucket{n: b, version: v.Version, entries: make(map[string]*entry), tombs: make(map[string]int64), lostAt: lostAt}
			s.buckets[b] = bk
			s.held++
			s.loading++
			changed = true
		case !own && bk != nil:
			s.buckets[b] = nil
			s.held--
			s.count -= len(bk.entries)
			if !bk.loaded {
				s.loading--
			}
			s.partLocked(bk, v.Version)
			lost = append(lost, bk)
			changed = true
		case bk != nil:
			bk.version = v.Version
			if bk.parked {
				// Ticks that fell while a newer view took it away may
				// not have fired anywhere.
				bk.parked = false
				for _, e := range bk.entries {
					if e.idx < 0 {
						s.scheduleLocked(e, now, lostAt)
					}
				}
			}
		}
	}
	if changed {
		runs := make(map[[2]int]*run)
		for b := 0; b < Buckets; {
			if s.buckets[b] == nil {
				b++
				continue
			}
			lo := b
			for b < Buckets && s.buckets[b] != nil {
				b++
			}
			k := [2]int{lo, b - 1}
			if r := s.runs[k]; r != nil {
				runs[k] = r
				continue
			}
			r := &run{lo: lo, hi: b - 1}
			r.ctx, r.cancel = context.WithCancel(s.ctx)
			runs[k] = r
			started = append(started, r)
		}
		for k, r := range s.runs {
			if runs[k] != r {
				r.cancel()
			}
		}
		s.runs = runs
	}
	s.version = v.Version
	s.mu.Unlock()
	// A lost bucket's reminders leave the heap a bucket per lock hold, so
	// that firing goes on for the rest meanwhile (due skips them already);
	// if they are most of the heap (this silo is leaving), in one pass.
	s.mu.Lock()
	lostN := 0
	for _, bk := range lost {
		lostN += len(bk.entries)
	}
	most := lostN > len(s.heap)/2
	if most {
		s.heap.keep(func(e *entry) bool { return s.holds(e.b) })
	}
	s.mu.Unlock()
	for _, bk := range lost {
		if most {
			break
		}
		s.mu.Lock()
		for _, e := range bk.entries {
			s.heap.remove(e)
		}
		s.mu.Unlock()
	}
	for _, r := range started {
		s.wg.Add(1)
		go s.runRange(r)
	}
	s.poke()
}

// holds reports whether bk is still held (not let go since). s.mu is held.
func (s *Service) holds(bk *bucket) bool { return s.buckets[bk.n] == bk }

// current reports whether r is still a run of the buckets held (not
// replaced since). s.mu is held.
func (s *Service) current(r *run) bool { return s.runs[[2]int{r.lo, r.hi}] == r }

// runRange keeps r's buckets in step with etcd while r lasts: it loads the
// buckets not loaded (each in pages, at one revision), then watches r's
// range from the oldest revision its buckets have seen, resuming after
// errors and loading again if etcd compacted the history the watch needed.
// It retries with backoff while etcd is away.
func (s *Service) runRange(r *run) {
	defer s.wg.Done()
	select { // what the legacy layout held at start is in the buckets
	case <-s.migrated:
	case <-r.ctx.Done():
		return
	}
	// Retries run on real time: they are not part of the schedule.
	b := retry.New(100*time.Millisecond, 5*time.Second, nil)
	for r.ctx.Err() == nil {
		from, err := s.loadRange(r)
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			s.warn("reminders: loading buckets from etcd failed; retrying", "buckets", fmt.Sprintf("%d-%d", r.lo, r.hi), "err", err)
			if !b.Wait(r.ctx, nil) {
				return
			}
			continue
		}
		b.Reset()
		for r.ctx.Err() == nil {
			from, err = s.watchRange(r, from)
			if err == errCompacted {
				s.mu.Lock()
				for n := r.lo; n <= r.hi; n++ {
					if bk := s.buckets[n]; bk != nil {
						bk.reload = true
					}
				}
				s.mu.Unlock()
				break
			}
			if r.ctx.Err() != nil {
				return
			}
			s.warn("reminders: watching buckets failed; resuming", "buckets", fmt.Sprintf("%d-%d", r.lo, r.hi), "err", err, "from_revision", from)
			if !b.Wait(r.ctx, nil) {
				return
			}
		}
	}
}

// loadRange loads r's buckets that need it, and returns the revision to
// watch r's range from: one past the oldest any of them has seen.
func (s *Service) loadRange(r *run) (int64, error) {
	var from int64
	for n := r.lo; n <= r.hi; n++ {
		s.mu.Lock()
		bk := s.buckets[n]
		need := bk != nil && (!bk.loaded || bk.reload)
		s.mu.Unlock()
		if bk == nil {
			return 0, context.Canceled // r was replaced
		}
		if need {
			if err := s.loadBucket(r, bk); err != nil {
				return 0, err
			}
		}
		s.mu.Lock()
		if from == 0 || bk.seen+1 < from {
			from = bk.seen + 1
		}
		s.mu.Unlock()
	}
	return from, nil
}

// markLoadedLocked closes Loaded, once, when nothing is loading after the
// legacy layout was moved.
func (s *Service) markLoadedLocked() {
	if s.loading > 0 {
		return
	}
	select {
	case <-s.migrated:
	default:
		return
	}
	select {
	case <-s.loaded:
	default:
		close(s.loaded)
	}
}

// notifyLocked wakes Settled.
func (s *Service) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// warn logs a failure of etcd once a second at most: with etcd away, every
// bucket's goroutine fails at once.
func (s *Service) warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := s.warned.Load()
	if now-last < int64(time.Second) || !s.warned.CompareAndSwap(last, now) {
		s.cfg.Logger.Debug(msg, args...)
		return
	}
	s.cfg.Logger.Warn(msg, args...)
}

// bucketPrefix is the etcd prefix of bucket b's reminders.
func (k keys) bucket(b int) string { return k.root + bucketNames[b] + "/" }

func parseBucket(s string) (int, bool) {
	if len(s) != 4 {
		return 0, false
	}
	b, err := strconv.Atoi(s)
	return b, err == nil && b >= 0 && b < Buckets
}
