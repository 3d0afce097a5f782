package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/reminders"
)

// countingKV counts the keys read back.
type countingKV struct {
	clientv3.KV
	read atomic.Int64
}

func (k *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := k.KV.Get(ctx, key, opts...)
	if err == nil {
		k.read.Add(int64(len(resp.Kvs)))
	}
	return resp, err
}

func (k *countingKV) Txn(ctx context.Context) clientv3.Txn {
	return &countingTxn{Txn: k.KV.Txn(ctx), k: k}
}

type countingTxn struct {
	clientv3.Txn
	k *countingKV
}

func (t *countingTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *countingTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *countingTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t *countingTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil {
		for _, r := range resp.Responses {
			if rr := r.GetResponseRange(); rr != nil {
				t.k.read.Add(int64(len(rr.Kvs)))
			}
		}
	}
	return resp, err
}

// placement is the silos' view: a bucket's owner has the highest weight.
type placement struct {
	mu      sync.Mutex
	version int64
	members []string
	prev    []string // the members of the view before
}

func (p *placement) set(members []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.version++
	p.prev, p.members = p.members, slices.Clone(members)
}

// owner is bucket b's owner among members.
func owner(members []string, b int) string {
	best, bw := "", uint64(0)
	for _, m := range members {
		if w := weight(m, b); best == "" || w > bw {
			best, bw = m, w
		}
	}
	return best
}

// fetch is silo me's reminders.Config.Fetch while handOver is set: it asks
// the bucket's owner in the view before, as a silo asks it over the peer
// transport.
func (p *placement) fetch(me string, handOver *atomic.Bool, svc func(name string) *reminders.Service) func(context.Context, int) ([]byte, error) {
	return func(_ context.Context, b int) ([]byte, error) {
		p.mu.Lock()
		from := owner(p.prev, b)
		p.mu.Unlock()
		s := svc(from)
		if !handOver.Load() || from == me || s == nil {
			return nil, errs.New(codes.NotFound, "no silo to hand bucket %d over", b)
		}
		return s.Export(b)
	}
}

func weight(member string, b int) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range []byte(member + "/" + reminders.BucketName(b)) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	return h ^ h>>29
}

// view answers from a table per view, as the cluster's owner table does.
func (p *placement) view(me string) func() reminders.View {
	var cache atomic.Pointer[reminders.View]
	return func() reminders.View {
		p.mu.Lock()
		members, version := p.members, p.version
		p.mu.Unlock()
		if v := cache.Load(); v != nil && v.Version == version {
			return *v
		}
		var owns [reminders.Buckets]bool
		for b := range owns {
			owns[b] = owner(members, b) == me
		}
		v := &reminders.View{Version: version, Owns: func(b int) bool { return owns[b] }}
		cache.Store(v)
		return *v
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// runReminders is the reminders mode: reminder services on one etcd, each
// placed as a silo of the cluster places buckets.
func runReminders(ctx context.Context, o opts) error {
	dir, err := os.MkdirTemp("", "scale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	etcd, err := startEtcd(ctx, filepath.Join(dir, "etcd"))
	if err != nil {
		return err
	}
	defer etcd.Close()
	cli := etcd.client
	kv := &countingKV{KV: cli.KV}
	cli.KV = kv
	const prefix = "/scale/"
	far := time.Now().Add(24 * time.Hour) // quiet: nothing fires while measured
	base := reminders.Config{Client: cli, Prefix: prefix, MinPeriod: time.Millisecond, Logger: logger,
		Deliver: func(context.Context, *grain.Message) error { return nil }}

	start := time.Now()
	if _, err := seed(ctx, cli, prefix, o.reminders, 1000, 4, seedAddr, func(int) time.Time { return far }, time.Hour); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	emit(row{Bench: "scale-seed", N: o.reminders, Median: time.Since(start).Seconds(), Unit: "s",
		Note: "written in their stored layout, 1,000 a transaction (etcd without fsync)"})

	// Registration, through a silo that holds nothing: a sample, on top.
	none := base
	none.View = func() reminders.View { return reminders.View{Owns: func(int) bool { return false }} }
	reg, err := reminders.New(ctx, none)
	if err != nil {
		return err
	}
	if got, err := reg.List(ctx, seedAddr(0)); err != nil || len(got) != 1 || got[0].Period != time.Hour || !got[0].Due.Equal(time.UnixMilli(far.UnixMilli())) {
		reg.Close()
		return fmt.Errorf("a seeded reminder does not read back as registered: %v %w", got, err)
	}
	if o.register > 0 {
		lat := make([]float64, o.register)
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Value
		start := time.Now()
		for range o.conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < o.register; i = int(next.Add(1)) - 1 {
					t := time.Now()
					if err := reg.Register(ctx, seedAddr(i), grain.Reminder{Name: "extra", Period: time.Hour, Due: far}); err != nil {
						failed.Store(err)
						return
					}
					lat[i] = float64(time.Since(t).Microseconds())
				}
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			reg.Close()
			return err
		}
		emit(row{Bench: "scale-register", N: o.register, Median: median(lat), Unit: "us",
			Note: fmt.Sprintf("%.0f/s, %d callers (etcd without fsync)", float64(o.register)/time.Since(start).Seconds(), o.conc)})
	}
	reg.Close()
	total := o.reminders + o.register

	// The anchor: one service holding every bucket.
	h0, r0 := heap(), kv.read.Load()
	start = time.Now()
	all, err := reminders.New(ctx, base)
	if err != nil {
		return err
	}
	<-all.Loaded()
	loadAll := time.Since(start)
	hAll := int64(heap()) - int64(h0)
	emit(row{Bench: "scale-anchor-all", N: all.Stats().Reminders, Median: float64(hAll) / (1 << 20), Unit: "MiB",
		Note: fmt.Sprintf("every bucket: load %v, %d keys read", loadAll.Round(time.Millisecond), kv.read.Load()-r0)})
	all.Close()
	all = nil

	// The silos, started one after another.
	silos := o.silos
	p := &placement{}
	names := make([]string, silos)
	for i := range names {
		names[i] = fmt.Sprintf("silo-%02d", i)
	}
	p.set(names)
	svcs := make([]*reminders.Service, silos)
	defer func() {
		for _, s := range svcs {
			if s != nil {
				s.Close()
			}
		}
	}()
	var heaps, reads, loads []float64
	maxHeap := 0.0
	var handOver atomic.Bool
	byName := func(name string) *reminders.Service {
		if i := slices.Index(names, name); i >= 0 {
			return svcs[i]
		}
		return nil
	}
	startSilo := func(i int) (heapMiB, keys, ms float64, err error) {
		cfg := base
		cfg.View = p.view(names[i])
		cfg.Fetch = p.fetch(names[i], &handOver, byName)
		h0, r0 := heap(), kv.read.Load()
		start := time.Now()
		if svcs[i], err = reminders.New(ctx, cfg); err != nil {
			return 0, 0, 0, err
		}
		<-svcs[i].Loaded()
		ms = float64(time.Since(start).Microseconds()) / 1e3
		return float64(int64(heap())-int64(h0)) / (1 << 20), float64(kv.read.Load() - r0), ms, nil
	}
	for i := range names {
		h, k, ms, err := startSilo(i)
		if err != nil {
			return err
		}
		heaps, reads, loads = append(heaps, h), append(reads, k), append(loads, ms)
		maxHeap = max(maxHeap, h)
	}
	share := float64(hAll) / (1 << 20) / float64(silos)
	emit(row{Bench: "scale-silo-heap", N: silos, Median: median(slices.Clone(heaps)), Unit: "MiB",
		Note: fmt.Sprintf("max %.1f MiB; anchor x%.3f (ideal 1/%d = %.3f); goal <= 1/%d of the anchor + 10%% = %.1f MiB",
			maxHeap, median(slices.Clone(heaps))*(1<<20)/float64(hAll), silos, 1/float64(silos), silos, share*1.1)})
	emit(row{Bench: "scale-silo-readback", N: silos, Median: median(slices.Clone(reads)), Unit: "keys",
		Note: fmt.Sprintf("of %d; load median %.0f ms", total, median(loads))})

	// A restart: the first silo stops and starts again, reading only its
	// buckets.
	svcs[0].Close()
	svcs[0] = nil
	_, k, ms, err := startSilo(0)
	if err != nil {
		return err
	}
	emit(row{Bench: "scale-restart", N: 1, Median: ms, Unit: "ms",
		Note: fmt.Sprintf("to loaded; %.0f keys read of %d (its share %d)", k, total, svcs[0].Stats().Reminders)})

	// A view change: the last silo leaves, then comes back; first with
	// every moved bucket read from etcd (the anchor), then handed over by
	// the silo that held it.
	var calls, settles, moved, keys []float64
	var prof *os.File
	if o.cpuprofile != "" {
		if prof, err = os.Create(o.cpuprofile); err != nil {
			return err
		}
		defer prof.Close()
		if err := pprof.StartCPUProfile(prof); err != nil {
			return err
		}
	}
	change := func(members []string, live []*reminders.Service) error {
		before := make([]int, len(live))
		for i, s := range live {
			before[i] = s.Stats().Reminders
		}
		r0 := kv.read.Load()
		p.set(members)
		t0 := time.Now()
		for _, s := range live {
			t := time.Now()
			s.Rebalance(time.Now())
			calls = append(calls, float64(time.Since(t).Nanoseconds())/1e3)
		}
		for i, s := range live {
			if err := s.Settled(ctx); err != nil {
				return err
			}
			if d := s.Stats().Reminders - before[i]; d > 0 {
				settles = append(settles, float64(time.Since(t0).Microseconds())/1e3)
				moved = append(moved, float64(d))
			}
		}
		keys = append(keys, float64(kv.read.Load()-r0))
		return nil
	}
	for _, ho := range []bool{false, true} {
		handOver.Store(ho)
		calls, settles, moved, keys = nil, nil, nil, nil
		if err := change(names[:silos-1], svcs); err != nil { // leave: the last silo lets go of all
			return err
		}
		if err := change(names, svcs); err != nil { // join back
			return err
		}
		fetched := uint64(0)
		for _, s := range svcs {
			fetched += s.Stats().Fetched
		}
		bench, how := "scale-view-change-settle-etcd", "read from etcd (the anchor)"
		if ho {
			bench, how = "scale-view-change-settle", "handed over by the silo that held them"
		}
		emit(row{Bench: bench, N: len(settles), Median: median(slices.Clone(settles)), Unit: "ms",
			Note: fmt.Sprintf("gaining silos, to moved buckets loaded (max %.0f ms); %.0f reminders moved per gaining silo (median), %s: %.0f keys read from etcd over the leave and the join, %d buckets handed over so far; goal <= 100 ms",
				slices.Max(settles), median(moved), how, keys[0]+keys[1], fetched)})
	}
	if prof != nil {
		pprof.StopCPUProfile()
	}
	emit(row{Bench: "scale-view-change-call", N: len(calls), Median: median(calls), Unit: "us", Note: "Rebalance on the view-installing goroutine"})
	return nil
}
