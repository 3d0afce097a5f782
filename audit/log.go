package audit

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Defaults of Config.
const (
	DefaultPartitions = 16
	// DefaultRetention is how long records are kept: a year.
	DefaultRetention = 365 * 24 * time.Hour
)

// Config configures a Log.
type Config struct {
	// Store keeps the records. Required.
	Store Store
	// Partitions is how many chains the records spread over, by their
	// agent's address (default DefaultPartitions).
	Partitions int
	// Retention is how long Sweep keeps records (default
	// DefaultRetention; negative: forever).
	Retention time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger logs sweeps that failed.
	Logger *slog.Logger
}

// Log appends records to a Store, in partitions, and reads, verifies and
// sweeps them. A nil *Log records nothing: Append returns nil at once (a
// silo with the audit off). Safe for concurrent use.
type Log struct {
	cfg Config

	mu    sync.Mutex
	parts map[string]*partQueue
	bg    sync.WaitGroup // the appends of Go
}

// partQueue is one partition's group commit: the appends that arrive
// while one is written go together in the next.
type partQueue struct {
	busy    bool
	pending []*pendingAppend
}

type pendingAppend struct {
	rec  Record
	err  error
	done chan struct{}
}

// appendTimeout bounds the write of one group.
const appendTimeout = 10 * time.Second

// maxGroup bounds the records of one group commit.
const maxGroup = 40

// New returns a log on cfg.Store.
func New(cfg Config) (*Log, error) {
	if cfg.Store == nil {
		return nil, errs.New(codes.InvalidArgument, "audit: New: no Store")
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = DefaultPartitions
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Log{cfg: cfg, parts: map[string]*partQueue{}}, nil
}

// Enabled reports whether l records (l is not nil).
func (l *Log) Enabled() bool { return l != nil }

// Store returns the log's store.
func (l *Log) Store() Store { return l.cfg.Store }

// Append records r, unless a record of r.Key is in the log already, and
// returns once it is written (or was there). A zero r.Time is now; a
// record without a key is refused (InvalidArgument). Concurrent appends to
// one partition are written together. If the store fails, the error says
// the record may have been written: appending it again (same key) writes
// it at most once.
func (l *Log) Append(ctx context.Context, r Record) error {
	if l == nil {
		return nil
	}
	p, r, err := l.Prepare(r)
	if err != nil {
		return err
	}
	a := &pendingAppend{rec: r, done: make(chan struct{})}
	l.mu.Lock()
	q := l.parts[p]
	if q == nil {
		q = &partQueue{}
		l.parts[p] = q
	}
	q.pending = append(q.pending, a)
	if q.busy {
		l.mu.Unlock()
		select {
		case <-a.done:
			return a.err
		case <-ctx.Done():
			// It stays queued and may still be written.
			return errs.Wrap(codes.DeadlineExceeded, ctx.Err(), "audit: append (may have run)")
		}
	}
	q.busy = true
	l.mu.Unlock()
	// This caller writes the queue's groups until it is empty.
	for {
		l.mu.Lock()
		n := min(len(q.pending), maxGroup)
		group := q.pending[:n:n]
		q.pending = q.pending[n:]
		if n == 0 {
			q.busy = false
			l.mu.Unlock()
			break
		}
		l.mu.Unlock()
		recs := make([]Record, len(group))
		seen := make(map[string]bool, len(group))
		for i, g := range group {
			recs[i] = g.rec
			if seen[g.rec.Key] {
				recs[i].Key = "" // a duplicate within the group: dropped below
			}
			seen[g.rec.Key] = true
		}
		kept := recs[:0]
		for _, r := range recs {
			if r.Key != "" {
				kept = append(kept, r)
			}
		}
		// The group is written on a context of its own: other callers
		// wait for it.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), appendTimeout)
		_, err := l.cfg.Store.Append(wctx, p, kept)
		cancel()
		for _, g := range group {
			g.err = err
			close(g.done)
		}
	}
	<-a.done
	return a.err
}

// Prepare returns r as Append writes it (its time set if zero, its outcome
// OutcomeOK if empty, its fields clipped) and its partition, for a store
// that writes it in a transaction of the caller's (auditstore.Etcd.Stage).
// A record without a key or a kind is refused (InvalidArgument).
func (l *Log) Prepare(r Record) (partition string, _ Record, _ error) {
	if r.Key == "" || r.Kind == "" {
		return "", r, errs.New(codes.InvalidArgument, "audit: a record needs a key and a kind; not recorded")
	}
	if r.Time.IsZero() {
		r.Time = l.cfg.Now()
	}
	if r.Outcome == "" {
		r.Outcome = OutcomeOK
	}
	r.OnBehalfOf = append([]string(nil), r.OnBehalfOf...)
	r.clean()
	return PartitionOf(r.Agent, l.cfg.Partitions), r, nil
}

// Go appends r in the background (as Append does) and calls failed, if
// not nil, with the error if it could not. Wait waits for these appends:
// a silo waits for them before it closes the store. For records whose
// action is done and whose caller need not wait for its record (an A2A
// task, an MCP call served).
func (l *Log) Go(ctx context.Context, r Record, failed func(error)) {
	if l == nil {
		return
	}
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		if err := l.Append(context.WithoutCancel(ctx), r); err != nil && failed != nil {
			failed(err)
		}
	}()
}

// Wait waits for the appends Go started.
func (l *Log) Wait() {
	if l != nil {
		l.bg.Wait()
	}
}

// Filter selects records.
type Filter struct {
	// Agent, Principal and Kind, if set, must equal the record's (a
	// principal also matches a record whose on-behalf-of chain holds it).
	Agent     string
	Principal string
	Kind      string
	// Since and Until bound the record's time (Until excluded).
	Since, Until time.Time
	// Limit bounds the records returned (default and most: 1000).
	Limit int
}

// MaxLimit is the most records one Query returns.
const MaxLimit = 1000

// matches reports whether r is one f selects.
func (f *Filter) matches(r *Record) bool {
	if f.Agent != "" && r.Agent != f.Agent {
		return false
	}
	if f.Kind != "" && r.Kind != f.Kind {
		return false
	}
	if f.Principal != "" && r.Principal != f.Principal {
		found := false
		for _, p := range r.OnBehalfOf {
			found = found || p == f.Principal
		}
		if !found {
			return false
		}
	}
	if !f.Since.IsZero() && r.Time.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !r.Time.Before(f.Until) {
		return false
	}
	return true
}

// scanPage is how many records Query and Verify read at once.
const scanPage = 500

// Query returns the records f selects, oldest first, at most f.Limit (the
// most recent ones if more match). With f.Agent set it reads that agent's
// partition only.
func Query(ctx context.Context, st Store, partitions int, f Filter) ([]Record, error) {
	if f.Limit <= 0 || f.Limit > MaxLimit {
		f.Limit = MaxLimit
	}
	heads, err := st.Heads(ctx)
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, h := range heads {
		if f.Agent != "" && partitions > 0 && h.Partition != PartitionOf(f.Agent, partitions) {
			continue
		}
		after := h.AnchorSeq
		for {
			recs, err := st.Scan(ctx, h.Partition, after, scanPage)
			if err != nil {
				return nil, err
			}
			for i := range recs {
				if f.matches(&recs[i]) {
					out = append(out, recs[i])
				}
			}
			if len(out) > 4*f.Limit {
				sortByTime(out)
				out = append([]Record(nil), out[len(out)-f.Limit:]...)
			}
			if len(recs) < scanPage {
				break
			}
			after = recs[len(recs)-1].Seq
		}
	}
	sortByTime(out)
	if len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, nil
}

func sortByTime(rs []Record) {
	sort.SliceStable(rs, func(i, j int) bool {
		if !rs[i].Time.Equal(rs[j].Time) {
			return rs[i].Time.Before(rs[j].Time)
		}
		if rs[i].Partition != rs[j].Partition {
			return rs[i].Partition < rs[j].Partition
		}
		return rs[i].Seq < rs[j].Seq
	})
}

// Query returns the records f selects (see package func Query).
func (l *Log) Query(ctx context.Context, f Filter) ([]Record, error) {
	return Query(ctx, l.cfg.Store, l.cfg.Partitions, f)
}

// Verify checks the log's chains (see package func Verify).
func (l *Log) Verify(ctx context.Context) (Report, error) { return Verify(ctx, l.cfg.Store) }

// Sweep removes, in every partition, the records older than the
// retention, and returns how many it removed.
func (l *Log) Sweep(ctx context.Context) (int, error) {
	if l.cfg.Retention < 0 {
		return 0, nil
	}
	heads, err := l.cfg.Store.Heads(ctx)
	if err != nil {
		return 0, err
	}
	before := l.cfg.Now().Add(-l.cfg.Retention)
	total := 0
	for _, h := range heads {
		n, err := l.cfg.Store.Sweep(ctx, h.Partition, before, 10000)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// SweepEvery sweeps every period until ctx ends, logging failures.
func (l *Log) SweepEvery(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if _, err := l.Sweep(ctx); err != nil && ctx.Err() == nil {
			l.cfg.Logger.Warn("audit: sweep failed; the next one tries again", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
