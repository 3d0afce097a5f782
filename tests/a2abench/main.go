// Command a2abench measures A2A against the gRPC gateway in one run, on one
// silo (in this process, with its embedded etcd on disk, as `silo` runs):
//
//   - gateway-ask: an Ask of Echo through the gateway with the Go SDK (the
//     anchor);
//   - a2a-send-jsonrpc, a2a-send-rest: SendMessage of the A2A SDK's client
//     to Echo's endpoint, over each 1.0 transport, waiting for the
//     completed task: each call is a task (stored in etcd, working then
//     completed), so its rate is tasks per second;
//   - a2a-stream-first: SendStreamingMessage to Echo, the time to the
//     first streamed event (the task, working), and a2a-stream-last, to
//     its final event.
//
// The benches run in interleaved windows (-rounds), each after a warm-up,
// with N concurrent callers (-n) on their own agents. It prints one JSON
// line per bench and N: rates per round, their median, latency
// percentiles over all rounds, and ratio_median, the median rate over
// gateway-ask's. A program, not a test: figures are measured, never
// asserted. -cpuprofile writes a CPU profile of the run (the silo, its
// etcd and the callers share this process); -anchor=false leaves
// gateway-ask out, to profile the A2A benches alone.
//
//	go run ./tests/a2abench -rounds 5 -n 1,16
//	go run ./tests/a2abench -anchor=false -bench send-jsonrpc -n 16 -cpuprofile a2a.prof
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "a2abench:", err)
		os.Exit(1)
	}
}

// callFunc makes one call as caller i.
type callFunc func(ctx context.Context, i int) (time.Duration, error)

type series struct {
	bench  string
	n      int
	rates  []float64
	lat    []time.Duration
	calls  int64
	errors int64
	first  string // the first error
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("a2abench", flag.ContinueOnError)
	rounds := fs.Int("rounds", 5, "interleaved rounds")
	warm := fs.Duration("warmup", 300*time.Millisecond, "unmeasured warm-up before each window")
	win := fs.Duration("window", 2*time.Second, "measured window")
	nsFlag := fs.String("n", "1,16", "comma-separated caller counts")
	only := fs.String("bench", "", "run only the benches whose names contain this")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run (the silo, its etcd and the callers: one process) to this file")
	anchor := fs.Bool("anchor", true, "run gateway-ask too (false: only the benches -bench selects, for a profile of them alone; no ratios)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ns []int
	for _, s := range strings.Split(*nsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-n %q: want positive counts", *nsFlag)
		}
		ns = append(ns, n)
	}
	dir, err := os.MkdirTemp("", "a2abench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		return err
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "bench"
	cfg.GatewayAddr, cfg.HTTPAddr, cfg.A2A.Addr = "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Etcd.DataDir = dir
	if cfg.Etcd.EmbeddedAddr, err = freeAddr(); err != nil {
		return err
	}
	if cfg.Etcd.EmbeddedPeerAddr, err = freeAddr(); err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})) // warnings say why a run failed (a fence, an etcd stall)
	ctx := context.Background()
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer s.Close(ctx)

	maxN := slices.Max(ns)
	gw, err := client.Dial(ctx, []string{s.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		return err
	}
	defer gw.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * maxN}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	clients := map[spec.TransportProtocol][]*a2aclient.Client{}
	for _, p := range []spec.TransportProtocol{spec.TransportProtocolJSONRPC, spec.TransportProtocolHTTPJSON} {
		for i := range maxN {
			card, err := (&agentcard.Resolver{Client: hc}).Resolve(ctx, "http://"+s.A2AAddr(), agentcard.WithPath(fmt.Sprintf("/a2a/Echo/dev/b%d/.well-known/agent-card.json", i)))
			if err != nil {
				return err
			}
			c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc),
				a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []spec.TransportProtocol{p}}))
			if err != nil {
				return err
			}
			defer c.Destroy()
			clients[p] = append(clients[p], c)
		}
	}
	msg := func() *spec.SendMessageRequest {
		return &spec.SendMessageRequest{Message: spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart("ping"))}
	}
	send := func(p spec.TransportProtocol) callFunc {
		return func(ctx context.Context, i int) (time.Duration, error) {
			start := time.Now()
			res, err := clients[p][i].SendMessage(ctx, msg())
			if err != nil {
				return 0, err
			}
			if t, ok := res.(*spec.Task); !ok || t.Status.State != spec.TaskStateCompleted {
				return 0, fmt.Errorf("not completed: %v", res)
			}
			return time.Since(start), nil
		}
	}
	stream := func(first bool) callFunc {
		return func(ctx context.Context, i int) (time.Duration, error) {
			start := time.Now()
			var d time.Duration
			for ev, err := range clients[spec.TransportProtocolJSONRPC][i].SendStreamingMessage(ctx, msg()) {
				if err != nil {
					return 0, err
				}
				if d == 0 {
					d = time.Since(start)
				}
				if u, ok := ev.(*spec.TaskStatusUpdateEvent); ok && u.Status.State == spec.TaskStateCompleted {
					if !first {
						d = time.Since(start)
					}
					return d, nil
				}
			}
			return 0, errors.New("the stream ended without a final event")
		}
	}
	benches := []struct {
		name string
		call callFunc
	}{
		{"gateway-ask", func(ctx context.Context, i int) (time.Duration, error) {
			start := time.Now()
			_, err := gw.Ask(ctx, fmt.Sprintf("Echo:dev:b%d", i), &client.Message{Message: "ping"})
			return time.Since(start), err
		}},
		{"a2a-send-jsonrpc", send(spec.TransportProtocolJSONRPC)},
		{"a2a-send-rest", send(spec.TransportProtocolHTTPJSON)},
		{"a2a-stream-first", stream(true)},
		{"a2a-stream-last", stream(false)},
	}
	if *only != "" {
		benches = slices.DeleteFunc(benches, func(b struct {
			name string
			call callFunc
		}) bool {
			return b.name != "gateway-ask" && !strings.Contains(b.name, *only)
		})
	}
	if !*anchor {
		benches = benches[1:]
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, n := range ns {
		all := make([]*series, len(benches))
		for i, b := range benches {
			all[i] = &series{bench: b.name, n: n}
		}
		for range *rounds {
			for i, b := range benches {
				window(ctx, n, *warm, nil, b.call)
				window(ctx, n, *win, all[i], b.call)
			}
		}
		var base float64
		if *anchor {
			base = median(all[0].rates)
		}
		for _, sr := range all {
			emit(out, sr, base)
		}
	}
	return nil
}

// window runs n callers for d, recording into sr (nil: a warm-up).
func window(ctx context.Context, n int, d time.Duration, sr *series, call callFunc) {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	stop := time.Now().Add(d)
	var mu sync.Mutex
	var calls, errs atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			for time.Now().Before(stop) {
				l, err := call(ctx, i)
				if err != nil {
					if errs.Add(1) == 1 && sr != nil {
						mu.Lock()
						if sr.first == "" {
							sr.first = err.Error()
						}
						mu.Unlock()
					}
					continue
				}
				calls.Add(1)
				lat = append(lat, l)
			}
			if sr != nil {
				mu.Lock()
				sr.lat = append(sr.lat, lat...)
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	if sr != nil {
		sr.rates = append(sr.rates, float64(calls.Load())/time.Since(start).Seconds())
		sr.calls += calls.Load()
		sr.errors += errs.Load()
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// emit writes sr as a JSON line, its rate also as a ratio of the anchor's.
func emit(out io.Writer, sr *series, anchor float64) {
	slices.Sort(sr.lat)
	q := func(p float64) float64 {
		if len(sr.lat) == 0 {
			return 0
		}
		i := min(int(p*float64(len(sr.lat))), len(sr.lat)-1)
		return float64(sr.lat[i].Nanoseconds()) / 1e3
	}
	var sum time.Duration
	for _, l := range sr.lat {
		sum += l
	}
	mean := 0.0
	if len(sr.lat) > 0 {
		mean = float64(sum.Nanoseconds()) / float64(len(sr.lat)) / 1e3
	}
	rec := map[string]any{
		"bench": sr.bench, "n": sr.n, "rates": sr.rates, "rate_median": median(sr.rates),
		"p50_us": q(0.50), "p99_us": q(0.99), "max_us": q(1), "mean_us": mean,
		"calls": sr.calls, "errors": sr.errors,
	}
	if sr.first != "" {
		rec["first_error"] = sr.first
	}
	if anchor > 0 {
		rec["anchor"] = "gateway-ask"
		rec["ratio_median"] = median(sr.rates) / anchor
	}
	b, _ := json.Marshal(rec)
	fmt.Fprintln(out, string(b))
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
