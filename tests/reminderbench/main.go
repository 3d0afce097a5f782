// Command reminderbench measures the reminder service on an embedded etcd, and
// prints one JSON object per line (the fields of
// `go run ./tests/bench`):
//
//   - reminder-register: Register calls per second (n reminders, -c callers).
//   - reminder-first-call: from New on a store already holding n reminders to
//     the first Register answered (the silo serves while it loads), and
//     reminder-load: to the whole share loaded.
//   - reminder-lateness: -due reminders due in the same instant (the worst
//     case of "10,000 due in the same minute"), delivered through a grain
//     runtime to agents that each record how late their tick came;
//     rate_median is the ticks delivered per second during the burst, to set
//     beside Dapr's 15,463 triggers/s.
//   - reminder-etcd-writes-per-tick: etcd revisions and Put/Txn/Delete calls
//     while the burst fires (must be 0).
//
// Usage: go run ./tests/reminderbench [-n 100000] [-due 10000] [-c 64]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/reminders"
)

func main() {
	n := flag.Int("n", 100_000, "reminders registered (the silo's share)")
	due := flag.Int("due", 10_000, "reminders due at once")
	conc := flag.Int("c", 64, "concurrent Register callers")
	flag.Parse()
	if err := run(*n, *due, *conc); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

type row struct {
	Bench      string  `json:"bench"`
	N          int     `json:"n"`
	RateMedian float64 `json:"rate_median,omitempty"`
	P50us      float64 `json:"p50_us,omitempty"`
	P99us      float64 `json:"p99_us,omitempty"`
	P999us     float64 `json:"p999_us,omitempty"`
	MeanUs     float64 `json:"mean_us,omitempty"`
	Value      *int64  `json:"value,omitempty"`
	Note       string  `json:"note,omitempty"`
}

func emit(r row) {
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

// countingKV counts the write calls that go through the service's client.
type countingKV struct {
	clientv3.KV
	writes atomic.Int64
}

func (k *countingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	k.writes.Add(1)
	return k.KV.Put(ctx, key, val, opts...)
}

func (k *countingKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	k.writes.Add(1)
	return k.KV.Delete(ctx, key, opts...)
}

func (k *countingKV) Txn(ctx context.Context) clientv3.Txn {
	k.writes.Add(1)
	return k.KV.Txn(ctx)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// lateAgent records how late each tick came: the reminder's message is its
// due time in Unix ns.
type lateAgent struct{ rec *recorder }

func (a lateAgent) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	due, err := strconv.ParseInt(m.Message, 10, 64)
	if err == nil {
		a.rec.add(time.Since(time.Unix(0, due)))
	}
	return nil, nil
}

type recorder struct {
	mu    sync.Mutex
	lat   []time.Duration
	first time.Time
	last  time.Time
	done  chan struct{}
	want  int
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if len(r.lat) == 0 {
		r.first = now
	}
	r.last = now
	r.lat = append(r.lat, d)
	if len(r.lat) == r.want {
		close(r.done)
	}
}

func run(n, dueN, conc int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "reminderbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	caddr, err := freeAddr()
	if err != nil {
		return err
	}
	paddr, err := freeAddr()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	etcd, err := etcdstore.Start(ctx, etcdstore.Config{DataDir: dir, EmbeddedAddr: caddr, EmbeddedPeerAddr: paddr, Logger: logger})
	if err != nil {
		return err
	}
	defer etcd.Close()
	cli := etcd.Client()
	kv := &countingKV{KV: cli.KV}
	cli.KV = kv

	rec := &recorder{done: make(chan struct{}), want: dueN}
	reg := grain.NewRegistry()
	if err := reg.Register("Late", func(grain.Host) (grain.Agent, error) { return lateAgent{rec}, nil }); err != nil {
		return err
	}
	gcfg := grain.DefaultConfig()
	gcfg.Logger = logger
	rt, err := grain.New(gcfg, reg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
	}()
	cfg := reminders.Config{
		Client:    cli,
		Prefix:    etcd.Prefix(),
		MinPeriod: time.Millisecond,
		Known:     func(t string) bool { _, ok := reg.Lookup(t); return ok },
		Deliver:   rt.Send,
		Logger:    logger,
	}

	// 1. Register n reminders, due in an hour (they stay quiet).
	svc, err := reminders.New(ctx, cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	lat, err := registerAll(ctx, svc, conc, "q", n, time.Now().Add(time.Hour), "0")
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	emit(stats("reminder-register", lat, float64(n)/elapsed.Seconds(), fmt.Sprintf("%d callers, embedded etcd, fsync on", conc)))
	svc.Close()

	// 2. A silo whose share is n reminders: first call and full load.
	start = time.Now()
	svc, err = reminders.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	if err := svc.Register(ctx, grain.Address{Type: "Late", Owner: "bench", Alias: "first"}, grain.Reminder{Name: "r", Period: time.Hour, Due: time.Now().Add(time.Hour)}); err != nil {
		return err
	}
	first := time.Since(start)
	<-svc.Loaded()
	loaded := time.Since(start)
	st := svc.Stats()
	emit(row{Bench: "reminder-first-call", N: st.Reminders, MeanUs: us(first), Note: "New to the first Register answered, while loading"})
	emit(row{Bench: "reminder-load", N: st.Reminders, MeanUs: us(loaded), RateMedian: float64(st.Reminders) / loaded.Seconds(), Note: "New to the whole share loaded (pages of 1000)"})

	// 3. dueN reminders due at the same instant, once all are registered
	// (twice the time registering them should take, plus 2 s).
	regTime := time.Duration(2 * float64(dueN) / (float64(n) / elapsed.Seconds()) * float64(time.Second))
	at := time.Now().Add(2*time.Second + regTime).Truncate(time.Millisecond)
	if _, err := registerAll(ctx, svc, conc, "d", dueN, at, strconv.FormatInt(at.UnixNano(), 10)); err != nil {
		return err
	}
	if time.Now().After(at) {
		return fmt.Errorf("registering %d reminders took longer than their due time; use a smaller -due", dueN)
	}
	revBefore, err := revision(ctx, cli)
	if err != nil {
		return err
	}
	writesBefore := kv.writes.Load()
	select {
	case <-rec.done:
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("only %d of %d ticks arrived", len(rec.lat), dueN)
	}
	rec.mu.Lock()
	burst := rec.last.Sub(at)
	lats := slices.Clone(rec.lat)
	rec.mu.Unlock()
	emit(stats("reminder-lateness", lats, float64(dueN)/burst.Seconds(), fmt.Sprintf("%d due at once among %d; rate = ticks delivered per second (Dapr: 15463 triggers/s)", dueN, st.Reminders+dueN)))
	revAfter, err := revision(ctx, cli)
	if err != nil {
		return err
	}
	writes := kv.writes.Load() - writesBefore
	revs := revAfter - revBefore
	emit(row{Bench: "reminder-etcd-writes-per-tick", N: dueN, Value: &writes, Note: fmt.Sprintf("Put/Txn/Delete calls while %d ticks fired; etcd revisions advanced by %d", dueN, revs)})
	return nil
}

func revision(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, "/agentsilo/none")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func stats(name string, lat []time.Duration, rate float64, note string) row {
	slices.Sort(lat)
	q := func(p float64) float64 { return us(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return row{Bench: name, N: len(lat), RateMedian: rate, P50us: q(0.50), P99us: q(0.99), P999us: q(0.999), MeanUs: us(sum / time.Duration(len(lat))), Note: note}
}

// registerAll registers count reminders of agents Late:bench:<alias><i> from
// conc goroutines and returns each call's latency.
func registerAll(ctx context.Context, svc *reminders.Service, conc int, alias string, count int, due time.Time, msg string) ([]time.Duration, error) {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr atomic.Value
		lat      = make([][]time.Duration, conc)
	)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(count) {
					return
				}
				addr := grain.Address{Type: "Late", Owner: "bench", Alias: alias + strconv.FormatInt(i, 10)}
				t0 := time.Now()
				err := svc.Register(ctx, addr, grain.Reminder{Name: "r", Period: time.Hour, MessageType: "tick", Message: msg, Due: due})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	return slices.Concat(lat...), nil
}
