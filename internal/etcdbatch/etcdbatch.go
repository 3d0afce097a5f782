// Package etcdbatch writes to etcd with group commit: the writes that
// arrive while transactions are in flight are committed together in the
// next one. It is what lets topics' publishes and acknowledgements and A2A
// task writes share etcd transactions (each commit is a Raft entry and a WAL
// fsync), instead of one transaction each.
//
// Each Write keeps its own conditions: in a shared transaction it is a
// nested transaction (If its conditions, Then its operations, Else its
// reads), so a writer whose condition fails fails alone and the others are
// written. A writer that finds fewer than Config.MaxInflight transactions
// in flight goes at once (no linger: an idle store adds no delay); those
// that come while all are in flight wait and go together in the next, as
// many as fit etcd's bounds:
// Config.MaxOps operations per level of a transaction (etcd's
// --max-txn-ops, 128 by default: the shared transaction holds one nested
// transaction per writer, and a writer's own operations count beside
// them) and Config.MaxBytes per request (etcd's --max-request-bytes is
// 1.5 MiB by default). Two writers that put (or put and delete) one key are
// never in one transaction: etcd refuses that.
//
// A writer may also queue its writes (Go) and wait for them later (Wait);
// until one is sent, it may take it back (Withdraw): a write that became
// useless while it waited (a task's start, when the task ended meanwhile)
// then costs nothing.
//
// Failures: when a shared transaction fails because etcd refuses the
// request (a lease gone, too many operations, too large), each of its
// writers is tried again alone, so that only the writer at fault gets the
// error; when etcd is away or slow, every writer of that transaction gets
// the error (whether it was written is then unknown, as for any etcd call
// that times out).
package etcdbatch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Config bounds a Batcher's transactions.
type Config struct {
	// MaxOps bounds the operations of each level of a transaction: the
	// writers in it, plus the most a writer has. Default: 128, etcd's
	// default --max-txn-ops.
	MaxOps int
	// MaxBytes bounds the keys and values of a transaction. Default: 1 MiB
	// (etcd's default --max-request-bytes is 1.5 MiB).
	MaxBytes int
	// Timeout bounds each transaction. Default: 5 s.
	Timeout time.Duration
	// MaxInflight bounds the transactions in flight at once: etcd commits
	// those that arrive together with one WAL fsync, and takes the next
	// while it syncs. A writer that finds one free goes at once; the
	// others wait and go together. Default: 4.
	MaxInflight int
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{MaxOps: 128, MaxBytes: 1 << 20, Timeout: 5 * time.Second, MaxInflight: 4}
}

// Write is one writer's part of a transaction: If its conditions hold, Then
// its operations, else Else's. Once Do returned nil for it, Succeeded,
// Responses and Revision are set (as a transaction's response would have
// them: Responses are Then's or Else's).
type Write struct {
	If   []clientv3.Cmp
	Then []clientv3.Op
	Else []clientv3.Op

	Succeeded bool
	Responses []*pb.ResponseOp
	// Revision is the revision of the transaction it was committed in.
	Revision int64

	err   error
	done  chan struct{}
	group *group // the writes of its Do
	// set by prepare
	cost, size int
	puts, dels []string
	alone      bool // it deletes a range: it goes in a transaction alone
}

// ErrInFlight is the Err of a write that was in flight when Do returned
// (its context ended): whether it is written is not known yet.
var ErrInFlight = errors.New("etcdbatch: the write is in flight; its outcome is unknown")

// ErrWithdrawn is the Err of a write taken back by Withdraw: it was never
// sent.
var ErrWithdrawn = errors.New("etcdbatch: the write was withdrawn before it was sent")

// Err is the write's failure once Do returned: nil if it was committed (its
// results are then set), ErrInFlight if Do returned before it was settled.
func (w *Write) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return ErrInFlight
	}
}

// Batcher commits Writes with group commit. It runs a goroutine only while
// writes are waiting or in flight. Safe for concurrent use.
type Batcher struct {
	cli *clientv3.Client
	cfg Config

	mu      sync.Mutex
	queue   []*Write
	running int // transactions in flight (a goroutine each)

	txns   atomic.Uint64
	writes atomic.Uint64

	// testHookCommit, if set, runs before each transaction with its writes.
	testHookCommit func(batch []*Write)
}

// New returns a Batcher of cli; zero fields of cfg take their defaults.
func New(cli *clientv3.Client, cfg Config) *Batcher {
	d := DefaultConfig()
	if cfg.MaxOps <= 0 {
		cfg.MaxOps = d.MaxOps
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = d.MaxBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = d.Timeout
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = d.MaxInflight
	}
	return &Batcher{cli: cli, cfg: cfg}
}

var (
	sharedMu sync.Mutex
	shared   = map[*clientv3.Client]*Batcher{}
)

// Of returns the Batcher shared by everything that writes through cli, with
// the default Config, so that their writes share transactions. It is
// forgotten when cli closes.
func Of(cli *clientv3.Client) *Batcher {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if b := shared[cli]; b != nil {
		return b
	}
	b := New(cli, Config{})
	shared[cli] = b
	context.AfterFunc(cli.Ctx(), func() {
		sharedMu.Lock()
		delete(shared, cli)
		sharedMu.Unlock()
	})
	return b
}

// Txns returns how many transactions the Batcher committed, and Writes how
// many writes they held.
func (b *Batcher) Txns() uint64   { return b.txns.Load() }
func (b *Batcher) Writes() uint64 { return b.writes.Load() }

// Do commits ws, in order, in as few transactions as fit, shared with other
// callers' writes, and returns once each is settled: nil if every one was
// committed (its condition held or not: see Succeeded), else the first
// write's error (each write has its own, Err). If ctx ends first, writes
// not yet sent are taken back (they fail with ctx's error), and Do returns
// ctx's error without waiting for those in flight: whether they were
// written is unknown.
func (b *Batcher) Do(ctx context.Context, ws ...*Write) error {
	b.Go(ws...)
	return b.Wait(ctx, ws...)
}

// Go queues ws as Do does and returns at once: Wait (with the same ws)
// then waits for them, and until it is called, Withdraw may take back
// those not yet sent.
func (b *Batcher) Go(ws ...*Write) {
	g := &group{}
	for _, w := range ws {
		w.prepare(g)
	}
	b.mu.Lock()
	b.queue = append(b.queue, ws...)
	if b.running < b.cfg.MaxInflight {
		b.running++
		go b.run()
	}
	b.mu.Unlock()
}

// Wait waits for ws, queued together by Go, and returns as Do does.
func (b *Batcher) Wait(ctx context.Context, ws ...*Write) error {
	for i, w := range ws {
		select {
		case <-w.done:
			continue
		case <-ctx.Done():
		}
		b.takeBack(ws[i:], ctx.Err())
		return ctx.Err()
	}
	for _, w := range ws {
		if w.err != nil {
			return w.err
		}
	}
	return nil
}

// takeBack removes the writes of ws still queued, failing them with err.
func (b *Batcher) takeBack(ws []*Write, err error) {
	mine := make(map[*Write]bool, len(ws))
	for _, w := range ws {
		mine[w] = true
	}
	b.mu.Lock()
	q := b.queue[:0]
	for _, w := range b.queue {
		if mine[w] {
			w.err = err
			close(w.done)
		} else {
			q = append(q, w)
		}
	}
	clear(b.queue[len(q):])
	b.queue = q
	b.mu.Unlock()
}

// Withdraw takes w back if it still waits to be sent, and reports whether
// it did: w is then never written, and its Do (or Wait) returns
// ErrWithdrawn. Once
// w is in a transaction (or settled), Withdraw reports false and its Do
// returns its outcome. It is for a writer whose write has become useless
// while it waited (a task that ended before its start was written: its
// end is the one write needed).
func (b *Batcher) Withdraw(w *Write) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, w)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	w.err = ErrWithdrawn
	close(w.done)
	return true
}

// queued returns how many writes wait (for tests).
func (b *Batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// group is the writes of one Do: they are committed in order, so a
// transaction of theirs is in flight only once the one before it is done.
type group struct{ inflight int }

// run commits what is queued, a transaction at a time, until nothing it
// may take is.
func (b *Batcher) run() {
	var batch []*Write
	for {
		b.mu.Lock()
		for _, w := range batch {
			w.group.inflight--
		}
		batch = b.take()
		if len(batch) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		for _, w := range batch {
			w.group.inflight++
		}
		b.mu.Unlock()
		b.commit(batch)
	}
}

// take removes from the queue the writes that fit one transaction, in
// queue order, up to the first that does not fit. A write waits, with the
// rest of its Do, when a part of that Do is in flight or when it clashes
// with the batch (so that each Do's writes commit in order); the writes of
// other Dos behind it may go. b.mu is held.
func (b *Batcher) take() []*Write {
	var (
		batch          []*Write
		maxCost, bytes int
		full           bool
		puts           = map[string]bool{}
		dels           = map[string]bool{}
		waiting        = map[*group]bool{}
		rest           = b.queue[:0]
	)
	for _, w := range b.queue {
		switch {
		case full || waiting[w.group] || w.group.inflight > 0:
			rest = append(rest, w)
			continue
		case len(batch) > 0 && (w.alone || len(batch)+1+max(maxCost, w.cost) > b.cfg.MaxOps || bytes+w.size > b.cfg.MaxBytes):
			full = true
			rest = append(rest, w)
			continue
		case len(batch) > 0 && clash(w, puts, dels):
			waiting[w.group] = true
			rest = append(rest, w)
			continue
		}
		batch = append(batch, w)
		maxCost, bytes = max(maxCost, w.cost), bytes+w.size
		for _, k := range w.puts {
			puts[k] = true
		}
		for _, k := range w.dels {
			dels[k] = true
		}
		full = w.alone
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	return batch
}

// clash reports whether w puts a key the batch puts or deletes, or deletes
// one it puts: etcd refuses such a transaction.
func clash(w *Write, puts, dels map[string]bool) bool {
	for _, k := range w.puts {
		if puts[k] || dels[k] {
			return true
		}
	}
	for _, k := range w.dels {
		if puts[k] {
			return true
		}
	}
	return false
}

// commit writes batch in one transaction; if etcd refuses it and it holds
// several writers, each is tried alone.
func (b *Batcher) commit(batch []*Write) {
	if b.testHookCommit != nil {
		b.testHookCommit(batch)
	}
	err := b.txn(batch)
	if err != nil && len(batch) > 1 && refused(err) {
		for _, w := range batch {
			b.settle(w, b.txn([]*Write{w}))
		}
		return
	}
	for _, w := range batch {
		b.settle(w, err)
	}
}

func (b *Batcher) settle(w *Write, err error) {
	w.err = err
	close(w.done)
}

// txn commits batch: one writer as a transaction of its own, several as
// nested transactions of one.
func (b *Batcher) txn(batch []*Write) error {
	ctx, cancel := context.WithTimeout(b.cli.Ctx(), b.cfg.Timeout) // a closed client ends it at once
	defer cancel()
	if len(batch) == 1 {
		w := batch[0]
		resp, err := b.cli.Txn(ctx).If(w.If...).Then(w.Then...).Else(w.Else...).Commit()
		if err != nil {
			return err
		}
		b.txns.Add(1)
		b.writes.Add(1)
		w.Succeeded, w.Responses, w.Revision = resp.Succeeded, resp.Responses, resp.Header.Revision
		return nil
	}
	ops := make([]clientv3.Op, len(batch))
	for i, w := range batch {
		ops[i] = clientv3.OpTxn(w.If, w.Then, w.Else)
	}
	resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return err
	}
	b.txns.Add(1)
	b.writes.Add(uint64(len(batch)))
	for i, w := range batch {
		nt := resp.Responses[i].GetResponseTxn()
		w.Succeeded, w.Responses, w.Revision = nt.GetSucceeded(), nt.GetResponses(), resp.Header.Revision
	}
	return nil
}

// refused reports whether etcd refused the request itself (rather than
// failing to serve it): something one of its writers asked for.
func refused(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.OutOfRange, codes.ResourceExhausted:
			return true
		}
		return false
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.OutOfRange, codes.ResourceExhausted:
			return true
		}
	}
	return false
}

// prepare computes what take needs of w.
func (w *Write) prepare(g *group) {
	w.done, w.group = make(chan struct{}), g
	w.err, w.Succeeded, w.Responses, w.Revision = nil, false, nil, 0
	w.puts, w.dels, w.alone = nil, nil, false
	w.cost, w.size = w.scan(w.If, w.Then, w.Else)
}

// scan returns the cost (the operations of the largest level, nested
// levels added) and size of a transaction, and collects its keys.
func (w *Write) scan(cmps []clientv3.Cmp, then, els []clientv3.Op) (cost, size int) {
	level := max(len(cmps), len(then), len(els))
	nested := 0
	for _, c := range cmps {
		size += len(c.KeyBytes()) + len(c.ValueBytes()) + 16
	}
	for _, ops := range [][]clientv3.Op{then, els} {
		for _, op := range ops {
			k := string(op.KeyBytes())
			size += len(k) + len(op.RangeBytes()) + 16
			switch {
			case op.IsTxn():
				c, t, e := op.Txn()
				nc, ns := w.scan(c, t, e)
				nested, size = max(nested, nc), size+ns
			case op.IsPut():
				size += len(op.ValueBytes())
				w.puts = append(w.puts, k)
			case op.IsDelete() && len(op.RangeBytes()) > 0:
				w.alone = true
			case op.IsDelete():
				w.dels = append(w.dels, k)
			}
		}
	}
	return level + nested, size
}
