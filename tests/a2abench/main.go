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
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/tests/internal/callbench"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "a2abench:", err)
		os.Exit(1)
	}
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
	if cfg.Etcd.EmbeddedAddr, err = callbench.FreeAddr(); err != nil {
		return err
	}
	if cfg.Etcd.EmbeddedPeerAddr, err = callbench.FreeAddr(); err != nil {
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
	send := func(p spec.TransportProtocol) callbench.Call {
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
	stream := func(first bool) callbench.Call {
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
		call callbench.Call
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
			call callbench.Call
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
		all := make([]*callbench.Series, len(benches))
		for i, b := range benches {
			all[i] = &callbench.Series{Bench: b.name, N: n}
		}
		for range *rounds {
			for i, b := range benches {
				callbench.Window(ctx, n, *warm, nil, b.call)
				callbench.Window(ctx, n, *win, all[i], b.call)
			}
		}
		var base float64
		if *anchor {
			base = all[0].RateMedian()
		}
		for _, sr := range all {
			callbench.Emit(out, sr, "gateway-ask", base)
		}
	}
	return nil
}
