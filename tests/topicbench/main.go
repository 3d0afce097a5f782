// Command topicbench measures durable publish/subscribe beside NATS
// JetStream doing the same work in the same run, and prints one JSON
// object per line (the fields of `go run ./tests/bench`):
//
//   - topics-publish-to-ack: messages published per second until every
//     subscription acknowledged every one (rate_median; publish_rate: until
//     the last publish returned) (with 1 and 10 durable
//     subscriptions, each one agent), published by -p SDK clients with -w
//     publishes in flight each, through a silo's gateway; a publish returns
//     once the message is in etcd.
//   - topics-e2e-latency: from the publish call to the subscriber's handler,
//     p50 and p99.
//   - topics-etcd-writes: etcd revisions (write transactions) per message
//     published, acknowledgments included.
//   - topics-js-*: the same through a silo whose topics are kept in NATS
//     JetStream (--topic-store nats://...; topicstore.JetStreamStore) on the
//     same nats-server as the anchor: what the store adds on top of
//     JetStream.
//   - jetstream-*: the same on a nats-server (-nats-server, Debian's
//     nats-server package) with JetStream on file storage: a stream with
//     interest retention (a message goes once every consumer acknowledged
//     it), one durable pull consumer per subscription acknowledging each
//     message, publishers waiting for the PubAck.
//
// The silo runs in this process, on an etcd embedded in it (etcd writes
// each commit to its WAL with fsync; JetStream's file store, in the Debian
// 2.9 server, does not sync each message: the anchor is the faster on that
// count). The three run in turn, -passes times; the median pass is
// reported. -stores etcd,jetstream chooses the silo's stores measured.
//
// Usage: go run ./tests/topicbench [-n 10000] [-p 8] [-w 16] [-passes 3] [-batch 16] [-rate R]
//
// -batch is the messages of one SDK call (Topics.PublishBatch; 1:
// Topics.Publish); -rate paces the publishers, all systems alike, to
// measure the latency at a rate below the top one.
//
// With -steady R, it measures instead etcd's size under steady load: R
// rounds, each publishing -n messages to one subscription and waiting until
// every one is acknowledged (and so deleted), first without compaction,
// then compacting at each round's end as the silo's compactor does at each
// interval (etcdstore.Store.CompactOnce, up to the revision noted one round
// before), and prints etcd's database size in use after each round
// (topics-etcd-size: db_in_use, db_size, in bytes):
//
//	go run ./tests/topicbench -steady 10 -n 2000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

func main() {
	n := flag.Int("n", 10000, "messages published per pass")
	pubs := flag.Int("p", 8, "publishers (SDK clients, NATS connections)")
	window := flag.Int("w", 16, "publishes in flight per publisher")
	flag.Float64Var(&paceRate, "rate", 0, "publish at most `R` messages a second in all, paced (0: as fast as they go): the latency at a given rate, e.g. half the top one")
	flag.IntVar(&batchSize, "batch", 16, "messages per SDK call to the silo (Topics.PublishBatch; 1: Topics.Publish, one a call); calls in flight per publisher: -w over it")
	passes := flag.Int("passes", 3, "passes of each system; the median is reported")
	natsBin := flag.String("nats-server", "nats-server", "the nats-server program")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to `file`")
	stores := flag.String("stores", "etcd,jetstream", "the silo's topic stores to measure beside raw JetStream, comma-separated")
	steady := flag.Int("steady", 0, "measure etcd's size over `R` rounds of steady load, without and with compaction (no JetStream)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	run := func(n, pubs, window, passes int, natsBin string) error {
		return runAll(n, pubs, window, passes, natsBin, strings.Split(*stores, ","))
	}
	if *steady > 0 {
		rounds := *steady
		run = func(n, pubs, window, _ int, _ string) error { return runSteady(n, pubs, window, rounds) }
	}
	if err := run(*n, *pubs, *window, *passes, *natsBin); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

type row struct {
	Bench      string  `json:"bench"`
	N          int     `json:"n"`
	Subs       int     `json:"subs"`
	Round      int     `json:"round,omitempty"`
	Compact    *bool   `json:"compact,omitempty"`
	DBInUse    int64   `json:"db_in_use,omitempty"`
	DBSize     int64   `json:"db_size,omitempty"`
	RateMedian float64 `json:"rate_median,omitempty"`
	PubRate    float64 `json:"publish_rate,omitempty"`
	P50us      float64 `json:"p50_us,omitempty"`
	P99us      float64 `json:"p99_us,omitempty"`
	CPUus      float64 `json:"cpu_us_per_msg,omitempty"`
	Value      float64 `json:"value,omitempty"`
	Note       string  `json:"note,omitempty"`
}

func emit(r row) {
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

// result is one pass of one system.
type result struct {
	rate     float64 // messages per second, published to all acknowledged
	pubRate  float64 // messages per second, until the last publish returned
	p50, p99 time.Duration
	writes   float64       // etcd revisions per message (agentsilo only)
	cpu      time.Duration // CPU per message published (see cpuNow)
}

// recorder collects the deliveries of a pass: latencies, and a signal when
// each subscription has seen every message.
type recorder struct {
	mu    sync.Mutex
	lat   []time.Duration
	seen  map[string]map[string]bool // subscription -> message ids
	want  int
	subs  int
	done  chan struct{}
	fired bool
}

func newRecorder(n, subs int) *recorder {
	return &recorder{want: n, subs: subs, seen: map[string]map[string]bool{}, done: make(chan struct{}), lat: make([]time.Duration, 0, n*subs)}
}

func (r *recorder) got(sub, id string, sent int64) {
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[sub] == nil {
		r.seen[sub] = map[string]bool{}
	}
	if r.seen[sub][id] {
		return // a redelivery
	}
	r.seen[sub][id] = true
	r.lat = append(r.lat, time.Duration(now-sent))
	if r.fired || len(r.seen) < r.subs {
		return
	}
	for _, s := range r.seen {
		if len(s) < r.want {
			return
		}
	}
	r.fired = true
	close(r.done)
}

func (r *recorder) percentiles() (p50, p99 time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	slices.Sort(r.lat)
	if len(r.lat) == 0 {
		return 0, 0
	}
	return r.lat[len(r.lat)/2], r.lat[len(r.lat)*99/100]
}

// publishAll runs pubs publishers with window publishes in flight each,
// n messages in all.
// batchSize is -batch: the messages of one SDK call to the silo.
var batchSize = 16

// paceRate is -rate: messages a second in all (0: unpaced).
var paceRate float64

// pace waits until message i of a pass that began at t0 is due at
// paceRate.
func pace(ctx context.Context, t0 time.Time, i int) {
	if paceRate <= 0 {
		return
	}
	if d := time.Until(t0.Add(time.Duration(float64(i) / paceRate * float64(time.Second)))); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
}

// publishBatches publishes n messages from pubs publishers, in calls of
// up to batch messages (publish(p, count)), window/batch calls in flight
// per publisher.
func publishBatches(ctx context.Context, n, pubs, window, batch int, publish func(p, count int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	calls := max(window/batch, 1)
	errc := make(chan error, pubs*calls)
	for p := range pubs {
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(int64(batch))) - batch
					if i >= n || ctx.Err() != nil {
						return
					}
					pace(ctx, t0, i)
					if err := publish(p, min(batch, n-i)); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

func publishAll(ctx context.Context, n, pubs, window int, publish func(p int, i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	errc := make(chan error, pubs*window)
	for p := range pubs {
		for range window {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n || ctx.Err() != nil {
						return
					}
					pace(ctx, t0, i)
					if err := publish(p, i); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

func runAll(n, pubs, window, passes int, natsBin string, stores []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	dir, err := os.MkdirTemp("", "topicbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	etcd, err := etcdtest.Run(ctx, filepath.Join(dir, "etcd"))
	if err != nil {
		return err
	}
	defer etcd.Close()
	ns, err := startNATS(ctx, natsBin, filepath.Join(dir, "nats"))
	if err != nil {
		return err
	}
	defer ns.stop()
	withEtcd, withJS := slices.Contains(stores, "etcd"), slices.Contains(stores, "jetstream")
	for _, subs := range []int{1, 10} {
		var ours, onJS, theirs []result
		for pass := range passes {
			if withEtcd {
				r, err := benchSilo(ctx, etcd, "", n, subs, pubs, window, fmt.Sprintf("/bench%d-%d/", subs, pass))
				if err != nil {
					return fmt.Errorf("agentsilo on etcd, %d subscriptions: %w", subs, err)
				}
				ours = append(ours, r)
			}
			if withJS {
				r, err := benchSilo(ctx, etcd, ns.url, n, subs, pubs, window, fmt.Sprintf("/benchjs%d-%d/", subs, pass))
				if err != nil {
					return fmt.Errorf("agentsilo on jetstream, %d subscriptions: %w", subs, err)
				}
				onJS = append(onJS, r)
			}
			r, err := benchJetStream(ctx, ns.url, n, subs, pubs, window, fmt.Sprintf("B%d_%d", subs, pass))
			if err != nil {
				return fmt.Errorf("jetstream, %d subscriptions: %w", subs, err)
			}
			theirs = append(theirs, r)
		}
		t := median(theirs)
		emit(row{Bench: "jetstream-publish-to-ack", N: n, Subs: subs, RateMedian: t.rate, PubRate: t.pubRate, CPUus: us(t.cpu)})
		emit(row{Bench: "jetstream-e2e-latency", N: n, Subs: subs, P50us: us(t.p50), P99us: us(t.p99)})
		if withEtcd {
			o := median(ours)
			emit(row{Bench: "topics-publish-to-ack", N: n, Subs: subs, RateMedian: o.rate, PubRate: o.pubRate, CPUus: us(o.cpu), Note: fmt.Sprintf("agentsilo on etcd/jetstream x%.2f, CPU x%.2f", o.rate/t.rate, float64(o.cpu)/float64(t.cpu))})
			emit(row{Bench: "topics-e2e-latency", N: n, Subs: subs, P50us: us(o.p50), P99us: us(o.p99)})
			emit(row{Bench: "topics-etcd-writes", N: n, Subs: subs, Value: o.writes, Note: "etcd revisions per message published, acknowledgments included"})
		}
		if withJS {
			o := median(onJS)
			emit(row{Bench: "topics-js-publish-to-ack", N: n, Subs: subs, RateMedian: o.rate, PubRate: o.pubRate, CPUus: us(o.cpu), Note: fmt.Sprintf("agentsilo on jetstream/jetstream x%.2f, CPU x%.2f", o.rate/t.rate, float64(o.cpu)/float64(t.cpu))})
			emit(row{Bench: "topics-js-e2e-latency", N: n, Subs: subs, P50us: us(o.p50), P99us: us(o.p99)})
			emit(row{Bench: "topics-js-writes", N: n, Subs: subs, Value: o.writes, Note: "JetStream messages the store wrote per message published, acknowledgments included"})
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func median(rs []result) result {
	slices.SortFunc(rs, func(a, b result) int {
		switch {
		case a.rate < b.rate:
			return -1
		case a.rate > b.rate:
			return 1
		}
		return 0
	})
	return rs[len(rs)/2]
}

// benchSilo runs one pass on a silo of this process, its topics in etcd,
// or in JetStream at natsURL if it is set.
func benchSilo(ctx context.Context, etcd *etcdtest.Running, natsURL string, n, subs, pubs, window int, prefix string) (result, error) {
	rec := newRecorder(n, subs)
	reg := grain.NewRegistry()
	err := reg.Register("BenchSink", func(grain.Host) (grain.Agent, error) {
		return agent(func(_ context.Context, m *grain.Message) (*grain.Message, error) {
			sent, _ := strconv.ParseInt(m.State["t"], 10, 64)
			rec.got(m.Subscription, m.ID, sent)
			return nil, nil
		}), nil
	})
	if err != nil {
		return result{}, err
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "bench"
	cfg.GatewayAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{etcd.Endpoint()}, Prefix: prefix}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})) // warnings say why a run failed (a fence, an etcd stall)
	cfg.Topics.MaxBacklog = n + 1
	if natsURL != "" {
		cfg.TopicStore = natsURL
		cfg.TopicNATS.Bucket = strings.NewReplacer("/", "_", "-", "_").Replace(strings.Trim(prefix, "/"))
	}
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		return result{}, err
	}
	if err := s.Start(ctx); err != nil {
		return result{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Close(cctx)
	}()
	clients := make([]*client.Client, pubs)
	for i := range clients {
		if clients[i], err = client.Dial(ctx, []string{s.GatewayAddr()}, client.WithPrincipal("bench")); err != nil {
			return result{}, err
		}
		defer clients[i].Close()
	}
	for i := range subs {
		if _, err := clients[0].Topics().Subscribe(ctx, fmt.Sprintf("BenchSink:bench:s%d", i), fmt.Sprintf("s%d", i), "bench.#"); err != nil {
			return result{}, err
		}
	}
	payload := string(make([]byte, 128))
	rev0, err := etcdRev(ctx, etcd)
	if err != nil {
		return result{}, err
	}
	start, cpu0 := time.Now(), cpuNow()
	fmt.Fprintf(os.Stderr, "topicbench: agentsilo, %d subscriptions\n", subs)
	if batchSize > 1 {
		err = publishBatches(ctx, n, pubs, window, batchSize, func(p, count int) error {
			ps := make([]client.Publication, count)
			t := strconv.FormatInt(time.Now().UnixNano(), 10)
			for i := range ps {
				ps[i] = client.Publication{Topic: "bench.orders.created", Message: &client.Message{Message: payload, State: map[string]string{"t": t}}}
			}
			rs, err := clients[p].Topics().PublishBatch(ctx, ps)
			for _, r := range rs {
				if err == nil {
					err = r.Err
				}
			}
			return err
		})
	} else {
		err = publishAll(ctx, n, pubs, window, func(p, i int) error {
			m := &client.Message{Message: payload, State: map[string]string{"t": strconv.FormatInt(time.Now().UnixNano(), 10)}}
			_, err := clients[p].Topics().Publish(ctx, "bench.orders.created", m)
			return err
		})
	}
	if err != nil {
		return result{}, err
	}
	published := time.Since(start)
	select {
	case <-rec.done:
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	elapsed, cpu := time.Since(start), (cpuNow()-cpu0)/time.Duration(n)
	p50, p99 := rec.percentiles()
	if natsURL != "" {
		w, err := jsWrites(ctx, natsURL, cfg.TopicNATS.Bucket, uint64(n*subs))
		if err != nil {
			return result{}, err
		}
		fmt.Fprintf(os.Stderr, "topicbench: agentsilo on jetstream, %d subscriptions: published in %v, all acknowledged after %v\n", subs, published.Round(time.Millisecond), elapsed.Round(time.Millisecond))
		return result{rate: float64(n) / elapsed.Seconds(), pubRate: float64(n) / published.Seconds(), p50: p50, p99: p99, writes: float64(w) / float64(n), cpu: cpu}, nil
	}
	// The acknowledgments are written in batches after the handler
	// returned: wait for the queues to be empty before reading the
	// revision.
	if err := waitEmpty(ctx, etcd, prefix); err != nil {
		return result{}, err
	}
	rev1, err := etcdRev(ctx, etcd)
	if err != nil {
		return result{}, err
	}
	fmt.Fprintf(os.Stderr, "topicbench: agentsilo, %d subscriptions: published in %v, all acknowledged after %v\n", subs, published.Round(time.Millisecond), elapsed.Round(time.Millisecond))
	return result{rate: float64(n) / elapsed.Seconds(), pubRate: float64(n) / published.Seconds(), p50: p50, p99: p99, writes: float64(rev1-rev0) / float64(n), cpu: cpu}, nil
}

// jsWrites waits until every consumer of the log of the store named
// bucket acknowledged every message (the stream, on interest retention,
// is then empty), then returns the messages written to the store's
// streams, and the acknowledgements (one per message and subscription, to
// their consumers: not stored as messages).
func jsWrites(ctx context.Context, url, bucket string, acks uint64) (uint64, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return 0, err
	}
	for {
		si, err := js.StreamInfo(bucket + "_log")
		if err != nil {
			return 0, err
		}
		if si.State.Msgs == 0 {
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	total := acks
	for _, name := range []string{"KV_" + bucket + "_reg", "KV_" + bucket + "_q", "KV_" + bucket + "_dead", "KV_" + bucket + "_idem", bucket + "_log"} {
		si, err := js.StreamInfo(name)
		if err != nil {
			return 0, err
		}
		total += si.State.LastSeq
	}
	return total, nil
}

type agent func(ctx context.Context, m *grain.Message) (*grain.Message, error)

func (f agent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return f(ctx, m)
}

func etcdRev(ctx context.Context, e *etcdtest.Running) (int64, error) {
	r, err := e.Client().Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return r.Header.Revision, nil
}

// waitEmpty waits until no message is queued under prefix: no entry held
// apart, and every subscription's cursor past the last record of the log.
func waitEmpty(ctx context.Context, e *etcdtest.Running, prefix string) error {
	cli := e.Client()
	for {
		tr, err := cli.Txn(ctx).Then(
			clientv3.OpGet(prefix+"topics/q/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
			clientv3.OpGet(prefix+"topics/log/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1)),
			clientv3.OpGet(prefix+"topics/cur/", clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return err
		}
		empty := tr.Responses[0].GetResponseRange().GetCount() == 0
		if last := tr.Responses[1].GetResponseRange().GetKvs(); empty && len(last) > 0 {
			for _, kv := range tr.Responses[2].GetResponseRange().GetKvs() {
				if c, err := strconv.ParseInt(string(kv.Value), 10, 64); err != nil || c < last[0].ModRevision {
					empty = false
				}
			}
		}
		if empty {
			return nil
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// natsServer is a nats-server process with JetStream.
type natsServer struct {
	cmd *exec.Cmd
	url string
}

func startNATS(ctx context.Context, bin, dir string) (*natsServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-js", "-sd", dir, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (apt-get install nats-server): %w", bin, err)
	}
	ns := &natsServer{cmd: cmd, url: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	natsPID = cmd.Process.Pid
	for {
		nc, err := nats.Connect(ns.url)
		if err == nil {
			nc.Close()
			return ns, nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			ns.stop()
			return nil, fmt.Errorf("nats-server did not come up: %w", err)
		}
	}
}

// natsPID is the nats-server's process, whose CPU cpuNow counts.
var natsPID int

// cpuNow is the CPU time used so far by this process (the silo, its
// embedded etcd, the publishers and subscribers) and by the nats-server:
// divided by the messages of a pass, what each cost the machine, a figure
// that the machine's load moves less than it moves the rates.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	d := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if natsPID == 0 {
		return d
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", natsPID))
	if err != nil {
		return d
	}
	// Fields 14 and 15 (utime, stime), in clock ticks of 10 ms, after
	// the command's closing parenthesis.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) > 12 {
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		d += time.Duration(ut+st) * 10 * time.Millisecond
	}
	return d
}

func (ns *natsServer) stop() {
	ns.cmd.Process.Kill()
	ns.cmd.Wait()
}

// benchJetStream runs one pass on JetStream.
func benchJetStream(ctx context.Context, url string, n, subs, pubs, window int, stream string) (result, error) {
	rec := newRecorder(n, subs)
	conns := make([]*nats.Conn, pubs)
	jss := make([]nats.JetStreamContext, pubs)
	for i := range conns {
		nc, err := nats.Connect(url)
		if err != nil {
			return result{}, err
		}
		defer nc.Close()
		conns[i] = nc
		if jss[i], err = nc.JetStream(nats.MaxWait(30 * time.Second)); err != nil {
			return result{}, err
		}
	}
	subject := stream + ".orders.created"
	if _, err := jss[0].AddStream(&nats.StreamConfig{
		Name:      stream,
		Subjects:  []string{stream + ".>"},
		Storage:   nats.FileStorage,
		Retention: nats.InterestPolicy,
	}); err != nil {
		return result{}, err
	}
	defer jss[0].DeleteStream(stream)
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := range subs {
		name := fmt.Sprintf("c%d", i)
		sc, err := nats.Connect(url)
		if err != nil {
			return result{}, err
		}
		defer sc.Close()
		js, err := sc.JetStream()
		if err != nil {
			return result{}, err
		}
		sub, err := js.PullSubscribe(subject, name, nats.AckExplicit(), nats.BindStream(stream))
		if err != nil {
			return result{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				msgs, err := sub.Fetch(256, nats.MaxWait(200*time.Millisecond))
				if err != nil && len(msgs) == 0 {
					continue
				}
				for _, m := range msgs {
					sent, _ := strconv.ParseInt(m.Header.Get("t"), 10, 64)
					meta, _ := m.Metadata()
					rec.got(name, strconv.FormatUint(meta.Sequence.Stream, 10), sent)
					m.Ack()
				}
			}
		}()
	}
	payload := make([]byte, 128)
	start, cpu0 := time.Now(), cpuNow()
	fmt.Fprintf(os.Stderr, "topicbench: jetstream, %d subscriptions\n", subs)
	err := publishAll(ctx, n, pubs, window, func(p, i int) error {
		m := nats.NewMsg(subject)
		m.Data = payload
		m.Header.Set("t", strconv.FormatInt(time.Now().UnixNano(), 10))
		_, err := jss[p].PublishMsg(m)
		return err
	})
	if err != nil {
		return result{}, err
	}
	published := time.Since(start)
	select {
	case <-rec.done:
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	elapsed := time.Since(start)
	p50, p99 := rec.percentiles()
	return result{rate: float64(n) / elapsed.Seconds(), pubRate: float64(n) / published.Seconds(), p50: p50, p99: p99, cpu: (cpuNow() - cpu0) / time.Duration(n)}, nil
}

// runSteady publishes n messages a round to one subscription, rounds
// times without compaction and rounds times with, and prints etcd's size
// in use after each round.
func runSteady(n, pubs, window, rounds int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	dir, err := os.MkdirTemp("", "topicbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	etcd, err := etcdtest.Run(ctx, filepath.Join(dir, "etcd"))
	if err != nil {
		return err
	}
	defer etcd.Close()
	// The compactor's code, driven by the rounds rather than a clock.
	es, err := etcdstore.Start(ctx, etcdstore.Config{Endpoints: []string{etcd.Endpoint()}, Prefix: "/steady/"})
	if err != nil {
		return err
	}
	defer es.Close()
	rec := &steadyRecorder{}
	reg := grain.NewRegistry()
	if err := reg.Register("BenchSink", func(grain.Host) (grain.Agent, error) {
		return agent(func(context.Context, *grain.Message) (*grain.Message, error) {
			rec.add()
			return nil, nil
		}), nil
	}); err != nil {
		return err
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "steady"
	cfg.GatewayAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{etcd.Endpoint()}, Prefix: "/steady/"}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})) // warnings say why a run failed (a fence, an etcd stall)
	cfg.Topics.MaxBacklog = n + 1
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Close(cctx)
	}()
	clients := make([]*client.Client, pubs)
	for i := range clients {
		if clients[i], err = client.Dial(ctx, []string{s.GatewayAddr()}, client.WithPrincipal("bench")); err != nil {
			return err
		}
		defer clients[i].Close()
	}
	if _, err := clients[0].Topics().Subscribe(ctx, "BenchSink:bench:s", "s", "bench.#"); err != nil {
		return err
	}
	payload := string(make([]byte, 128))
	var noted int64
	for _, compact := range []bool{false, true} {
		for round := 1; round <= rounds; round++ {
			want := rec.count() + int64(n)
			err := publishAll(ctx, n, pubs, window, func(p, _ int) error {
				_, err := clients[p].Topics().Publish(ctx, "bench.orders.created", &client.Message{Message: payload})
				return err
			})
			if err != nil {
				return err
			}
			for rec.count() < want {
				select {
				case <-time.After(10 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if err := waitEmpty(ctx, etcd, "/steady/"); err != nil {
				return err
			}
			if compact {
				if noted, err = es.CompactOnce(ctx, noted); err != nil {
					return err
				}
			}
			st, err := etcd.Client().Status(ctx, etcd.Endpoint())
			if err != nil {
				return err
			}
			emit(row{Bench: "topics-etcd-size", N: n, Subs: 1, Round: round, Compact: &compact, DBInUse: st.DbSizeInUse, DBSize: st.DbSize})
		}
	}
	return nil
}

type steadyRecorder struct{ n atomic.Int64 }

func (r *steadyRecorder) add()         { r.n.Add(1) }
func (r *steadyRecorder) count() int64 { return r.n.Load() }
