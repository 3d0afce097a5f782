// Command mcpbench measures MCP against the gRPC gateway in one run, on
// one silo (in this process, with its embedded etcd on disk, as `silo`
// runs), with 1,000 extra agent types registered beside the demo's:
//
//   - gateway-ask: an Ask of Echo through the gateway with the Go SDK (the
//     anchor);
//   - mcp-call: a tools/call of Echo_echo on the every-agent endpoint
//     (/mcp) with the MCP Go SDK's client, one session per caller;
//   - mcp-call-agent: a tools/call of echo on the agent's own endpoint
//     (/mcp/Echo/dev/bI);
//   - mcp-list: a whole tools/list of the every-agent endpoint (every
//     page: about 1,007 tools).
//
// The benches run in interleaved windows (-rounds), each after a warm-up,
// with N concurrent callers (-n) on their own agents. It prints one JSON
// line per bench and N: rates per round, their median, latency
// percentiles over all rounds, and ratio_median, the median rate over
// gateway-ask's. A program, not a test: figures are measured, never
// asserted.
//
//	go run ./tests/mcpbench -rounds 3 -n 1,16
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/tests/internal/callbench"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbench:", err)
		os.Exit(1)
	}
}

// headers adds the declared principal to every request.
type headers struct{ base http.RoundTripper }

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("x-agentsilo-principal", "dev")
	return h.base.RoundTrip(r)
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("mcpbench", flag.ContinueOnError)
	rounds := fs.Int("rounds", 3, "interleaved rounds")
	warm := fs.Duration("warmup", 300*time.Millisecond, "unmeasured warm-up before each window")
	win := fs.Duration("window", 2*time.Second, "measured window")
	nsFlag := fs.String("n", "1,16", "comma-separated caller counts")
	types := fs.Int("types", 1000, "extra agent types registered (each one tool)")
	only := fs.String("bench", "", "run only the benches whose names contain this (and the anchor)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the measured windows to this file")
	blockprofile := fs.String("blockprofile", "", "write a block profile of the measured windows to this file")
	mutexprofile := fs.String("mutexprofile", "", "write a mutex profile of the measured windows to this file")
	memprofile := fs.String("memprofile", "", "write an allocation profile (all of the run) to this file")
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
	dir, err := os.MkdirTemp("", "mcpbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		return err
	}
	for i := range *types {
		name := fmt.Sprintf("Bench%04d", i)
		err := reg.Register(name, func(grain.Host) (grain.Agent, error) { return demoagents.Echo{}, nil }, grain.TypeInfo{
			Description: "An echo among many, for the listing's figures.",
			Skills:      []grain.Skill{{Name: "echo", Description: "repeats a message", Tags: []string{"bench"}}},
		})
		if err != nil {
			return err
		}
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "bench"
	cfg.GatewayAddr, cfg.HTTPAddr, cfg.MCP.Addr = "127.0.0.1:0", "", "127.0.0.1:0"
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
	var dials atomic.Int64
	dialer := &net.Dialer{}
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * maxN, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dialer.DialContext(ctx, network, addr)
	}}
	// Each caller keeps its connection: a count near the callers' shows
	// that no call pays for a new one.
	defer func() { fmt.Fprintf(os.Stderr, "mcpbench: %d HTTP connections dialled\n", dials.Load()) }()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: headers{base: tr}}
	session := func(path string) (*mcpsdk.ClientSession, error) {
		c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "mcpbench", Version: "1"}, nil)
		return c.Connect(ctx, &mcpsdk.StreamableClientTransport{Endpoint: "http://" + s.MCPAddr() + path, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	}
	var every, own []*mcpsdk.ClientSession
	for i := range maxN {
		cs, err := session("/mcp")
		if err != nil {
			return err
		}
		defer cs.Close()
		every = append(every, cs)
		if cs, err = session(fmt.Sprintf("/mcp/Echo/dev/b%d", i)); err != nil {
			return err
		}
		defer cs.Close()
		own = append(own, cs)
	}
	tools := 0
	for _, err := range every[0].Tools(ctx, nil) {
		if err != nil {
			return err
		}
		tools++
	}
	fmt.Fprintf(os.Stderr, "mcpbench: %d tools on /mcp\n", tools)
	call := func(sessions []*mcpsdk.ClientSession, name string, agent bool) callbench.Call {
		return func(ctx context.Context, i int) (time.Duration, error) {
			args := map[string]any{"message": "ping"}
			if agent {
				args["agent"] = fmt.Sprintf("dev:b%d", i)
			}
			start := time.Now()
			res, err := sessions[i].CallTool(ctx, &mcpsdk.CallToolParams{Name: name, Arguments: args})
			if err != nil {
				return 0, err
			}
			if res.IsError {
				return 0, fmt.Errorf("isError: %v", res.Content)
			}
			return time.Since(start), nil
		}
	}
	benches := []struct {
		name string
		call callbench.Call
	}{
		{"gateway-ask", func(ctx context.Context, i int) (time.Duration, error) {
			start := time.Now()
			_, err := gw.Ask(ctx, fmt.Sprintf("Echo:dev:b%d", i), &client.Message{MessageType: "echo", Message: "ping"})
			return time.Since(start), err
		}},
		{"mcp-call", call(every, "Echo_echo", true)},
		{"mcp-call-agent", call(own, "echo", false)},
		{"mcp-list", func(ctx context.Context, i int) (time.Duration, error) {
			start := time.Now()
			n := 0
			for _, err := range every[i].Tools(ctx, nil) {
				if err != nil {
					return 0, err
				}
				n++
			}
			if n != tools {
				return 0, fmt.Errorf("listed %d tools, want %d", n, tools)
			}
			return time.Since(start), nil
		}},
	}
	if *only != "" {
		benches = slices.DeleteFunc(benches, func(b struct {
			name string
			call callbench.Call
		}) bool {
			return b.name != "gateway-ask" && !strings.Contains(b.name, *only)
		})
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
	if *memprofile != "" {
		defer func() {
			if err := writeProfile("allocs", *memprofile); err != nil {
				fmt.Fprintln(os.Stderr, "mcpbench:", err)
			}
		}()
	}
	for _, p := range []struct{ name, file string }{{"block", *blockprofile}, {"mutex", *mutexprofile}} {
		if p.file == "" {
			continue
		}
		if p.name == "block" {
			runtime.SetBlockProfileRate(1)
		} else {
			runtime.SetMutexProfileFraction(1)
		}
		defer func() {
			if err := writeProfile(p.name, p.file); err != nil {
				fmt.Fprintln(os.Stderr, "mcpbench:", err)
			}
		}()
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
		anchor := all[0].RateMedian()
		for _, sr := range all {
			callbench.Emit(out, sr, "gateway-ask", anchor)
		}
	}
	return nil
}

// writeProfile writes the named runtime profile to file.
func writeProfile(name, file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
