// Command scale measures how the reminders scale with the silos: each silo
// holds, loads and watches only the buckets it owns. On one embedded etcd it
// registers -r reminders, then starts -silos reminder services (one per
// silo, placed by rendezvous over the silos' names as the cluster places
// buckets) one after another, and prints one JSON object per line:
//
//   - scale-register: Register calls per second and their latency, through
//     a silo that holds none of them (etcd's write is the cost).
//   - scale-anchor-all: the anchor, in the same run: one service holding
//     every bucket (what every silo held before buckets): heap and load time.
//   - scale-silo-heap, scale-silo-readback: per silo, the heap its service
//     holds once loaded and the reminders it read back at start (medians
//     over the silos, max in the note).
//   - scale-view-change-call: how long Rebalance holds the goroutine that
//     installs views (median over the silos and the leave and join).
//   - scale-view-change-settle: from Rebalance to the buckets moved loaded,
//     on the silos that gained (median), with the reminders moved.
//
// Usage: go run ./tests/scale [-silos 8] [-r 100000] [-c 64]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/reminders"
)

func main() {
	silos := flag.Int("silos", 8, "silos (reminder services)")
	n := flag.Int("r", 100_000, "reminders")
	conc := flag.Int("c", 64, "concurrent Register callers")
	flag.Parse()
	if err := run(*silos, *n, *conc); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

type row struct {
	Bench  string  `json:"bench"`
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Unit   string  `json:"unit"`
	Note   string  `json:"note,omitempty"`
}

func emit(r row) {
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

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

// placement is the silos' view: a bucket's owner has the highest weight.
type placement struct {
	mu      sync.Mutex
	version int64
	members []string
}

func (p *placement) set(members []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.version++
	p.members = slices.Clone(members)
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

func (p *placement) view(me string) func() reminders.View {
	return func() reminders.View {
		p.mu.Lock()
		members, version := p.members, p.version
		p.mu.Unlock()
		return reminders.View{Version: version, Owns: func(b int) bool {
			best, bw := "", uint64(0)
			for _, m := range members {
				if w := weight(m, b); best == "" || w > bw {
					best, bw = m, w
				}
			}
			return best == me
		}}
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func run(silos, n, conc int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "scale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	caddr, paddr := freeAddr(), freeAddr()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	etcd, err := etcdstore.Start(ctx, etcdstore.Config{DataDir: dir, EmbeddedAddr: caddr, EmbeddedPeerAddr: paddr, Logger: logger})
	if err != nil {
		return err
	}
	defer etcd.Close()
	cli := etcd.Client()
	kv := &countingKV{KV: cli.KV}
	cli.KV = kv
	far := time.Now().Add(24 * time.Hour) // quiet: nothing fires while measured
	base := reminders.Config{Client: cli, Prefix: etcd.Prefix(), MinPeriod: time.Millisecond, Logger: logger,
		Deliver: func(context.Context, *grain.Message) error { return nil }}

	// Registration, through a silo that holds nothing.
	none := base
	none.View = func() reminders.View { return reminders.View{Owns: func(int) bool { return false }} }
	reg, err := reminders.New(ctx, none)
	if err != nil {
		return err
	}
	lat := make([]float64, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				t := time.Now()
				a := grain.Address{Type: "Scale", Owner: "bench", Alias: fmt.Sprintf("a%d", i)}
				if err := reg.Register(ctx, a, grain.Reminder{Name: "r", Period: time.Hour, Due: far}); err != nil {
					failed.Store(err)
					return
				}
				lat[i] = float64(time.Since(t).Microseconds())
			}
		}()
	}
	wg.Wait()
	reg.Close()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	emit(row{Bench: "scale-register", N: n, Median: median(lat), Unit: "us", Note: fmt.Sprintf("%.0f/s, %d callers", float64(n)/time.Since(start).Seconds(), conc)})

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
	p := &placement{}
	names := make([]string, silos)
	for i := range names {
		names[i] = fmt.Sprintf("silo-%02d", i)
	}
	p.set(names)
	svcs := make([]*reminders.Service, silos)
	var heaps, reads, loads []float64
	maxHeap := 0.0
	for i, name := range names {
		cfg := base
		cfg.View = p.view(name)
		h0, r0 := heap(), kv.read.Load()
		start := time.Now()
		if svcs[i], err = reminders.New(ctx, cfg); err != nil {
			return err
		}
		<-svcs[i].Loaded()
		loads = append(loads, float64(time.Since(start).Milliseconds()))
		h := float64(int64(heap())-int64(h0)) / (1 << 20)
		heaps = append(heaps, h)
		maxHeap = max(maxHeap, h)
		reads = append(reads, float64(kv.read.Load()-r0))
	}
	defer func() {
		for _, s := range svcs {
			s.Close()
		}
	}()
	emit(row{Bench: "scale-silo-heap", N: silos, Median: median(slices.Clone(heaps)), Unit: "MiB",
		Note: fmt.Sprintf("max %.1f MiB; anchor x%.3f (ideal 1/%d = %.3f)", maxHeap, median(slices.Clone(heaps))*(1<<20)/float64(hAll), silos, 1/float64(silos))})
	emit(row{Bench: "scale-silo-readback", N: silos, Median: median(slices.Clone(reads)), Unit: "keys",
		Note: fmt.Sprintf("of %d; load median %.0f ms", n, median(loads))})

	// A view change: the last silo leaves, then comes back.
	var calls, settles, moved []float64
	change := func(members []string, live []*reminders.Service) error {
		before := make([]int, len(live))
		for i, s := range live {
			before[i] = s.Stats().Reminders
		}
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
				settles = append(settles, float64(time.Since(t0).Milliseconds()))
				moved = append(moved, float64(d))
			}
		}
		return nil
	}
	if err := change(names[:silos-1], svcs); err != nil { // leave: the last silo lets go of all
		return err
	}
	if err := change(names, svcs); err != nil { // join back
		return err
	}
	emit(row{Bench: "scale-view-change-call", N: len(calls), Median: median(calls), Unit: "us", Note: "Rebalance on the view-installing goroutine"})
	emit(row{Bench: "scale-view-change-settle", N: len(settles), Median: median(settles), Unit: "ms",
		Note: fmt.Sprintf("gaining silos, to moved buckets loaded; %.0f reminders moved per gaining silo (median)", median(moved))})
	return nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}
