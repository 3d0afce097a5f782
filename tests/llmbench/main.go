// Command llmbench measures the durable loop of model agents (package
// llm) on one silo with a real embedded etcd, against the same loop made
// with the provider's SDK alone, in the same run and process. Both talk
// to one fake model (llm/llmtest, real HTTP on loopback, the
// official openai-go/v3 client on both sides), which answers every
// conversation in the shape of one tool loop: it asks for the tool
// Count_add, then answers with its result. A loop is two model calls and
// one tool call, three steps.
//
//   - direct-loop (the anchor): the loop in plain Go over openai-go, the
//     tool an in-process count; nothing recorded.
//   - silo-loop: an SDK Ask through the silo's gateway to a model agent,
//     whose turn records each step in the agent's state on etcd before the
//     next (the model's tool call, the tool's result, the answer with the
//     turn's end) and whose tool call is an Ask to a Count agent.
//
// It measures them twice, each in -rounds interleaved windows (a warm-up,
// then -window measured; the median window's rate is reported):
//
//  1. the loop's cost: -n callers (default 1: one loop at a time), the
//     model answering at once or after -model-latency; wall time per loop
//     of silo-loop over direct-loop;
//  2. conversations: -conversations callers at once, the model answering
//     after -conv-latency (default 50 ms); steps a second of silo-loop over
//     direct-loop's (what the fake model serves alone);
//
// then the memory of a conversation: -conversations agents that ran one
// turn each are deactivated, leaving nothing in memory; it reports the
// heap they held while active, and the bytes of their stored records.
//
// The history part (-parts history, not run by default) measures the time
// from a request to the model's first request of the turn, for a
// conversation of -history turns (deactivated before, its record read
// again) against a new one's.
//
// -silos N runs N silos in this process (the others on the first one's
// embedded etcd); the callers' client takes every gateway. -lease sets
// their etcd lease: on a machine whose cores other work takes, the
// anchor's 1,000 callers can starve the silo's keepalives past the
// default 2 s lease, and a fenced silo refuses every later call.
//
// The approvals part (-parts approvals, not run by default) parks
// -approvals turns of agents whose tool call needs approval, ends their
// activations, then approves them all: it reports the time to park them,
// their records' size, how many stay active (none), the time until every
// turn has ended, and the calls run (one each: none lost, none twice).
//
// The model agents share the direct loop's HTTP client (a kept-alive
// connection per caller); -model-client default gives them the llm
// package's own instead, as a program that passes no llm.WithHTTPClient
// has.
//
// Each turn is a new conversation (agent) by default, as the direct loop
// starts from the user's message each time; -turns K keeps a caller on one
// conversation for K turns, whose model requests then carry its history.
//
// Output: one JSON line per series (the fields of tests/internal/callbench:
// rate_median in loops a second, latencies, CPU and allocations per loop,
// ratio_median against direct-loop), one line per part with its ratios
// ("bench": "loop-cost", "conversations", "memory"), then a table on
// stderr.
//
// Profiles: -cpuprofile covers the whole run, or with -cpuprofile-series
// only the measured windows of one series (one file each: merge them with
// go tool pprof -proto); -memprofile is the heap once the memory part's
// conversations are deactivated (the embedded etcd is in this process and
// in its figures).
//
// Usage: go run ./tests/llmbench [-rounds 3] [-window 2s] [-n 1] [-model-latency 0]
// [-conversations 1000] [-conv-latency 50ms] [-turns 1] [-parts loop,conversations,memory,approvals]
// [-approvals 10000] [-history 200] [-silos 1] [-lease 0] [-model-client bench]
// [-cpuprofile f [-cpuprofile-series silo-loop]] [-memprofile f]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/tests/internal/callbench"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "llmbench:", err)
		os.Exit(1)
	}
}

// The loop's shape: the tool the model asks for, with its arguments (the
// Count agent bench:c, one for all conversations), and the principal of
// the callers (the owner of every agent here).
const (
	principal = "bench"
	toolName  = "Count_add"
	toolArgs  = `{"agent": "bench:c", "input": {"by": 1}}`
	question  = "count once"
)

type config struct {
	rounds        int
	warmup        time.Duration
	window        time.Duration
	ns            []int
	latency       time.Duration
	conversations int
	convLatency   time.Duration
	turns         int
	parts         []string
	approvals     int
	history       int
	silos         int
	lease         time.Duration
	modelClient   string
	cpuprofile    string
	profSeries    string
	memprofile    string
}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("llmbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.rounds, "rounds", 3, "interleaved rounds (direct-loop, silo-loop) per figure; the median window is reported")
	fs.DurationVar(&c.warmup, "warmup", 300*time.Millisecond, "unmeasured warm-up before each window")
	fs.DurationVar(&c.window, "window", 2*time.Second, "measured window")
	ns := fs.String("n", "1", "part 1: comma-separated caller counts")
	fs.DurationVar(&c.latency, "model-latency", 0, "part 1: how long the model takes to answer")
	fs.IntVar(&c.conversations, "conversations", 1000, "part 2 and the memory: conversations at once")
	fs.DurationVar(&c.convLatency, "conv-latency", 50*time.Millisecond, "part 2: how long the model takes to answer")
	fs.IntVar(&c.turns, "turns", 1, "turns per conversation before its caller starts a new one")
	parts := fs.String("parts", "loop,conversations,memory", "what to measure: loop, conversations, memory, approvals, history")
	fs.IntVar(&c.approvals, "approvals", 10000, "the approvals part: turns parked waiting for an approval at once")
	fs.IntVar(&c.history, "history", 200, "the history part: turns of the long conversation")
	fs.DurationVar(&c.lease, "lease", 0, "the silos' etcd lease (0: the silo's default, 2 s); longer keeps a silo from fencing while the anchor's callers take the cores")
	fs.StringVar(&c.modelClient, "model-client", "bench", "the model agents' HTTP client: bench (the direct loop's, a kept-alive connection per caller) or default (the llm package's own, without llm.WithHTTPClient)")
	fs.IntVar(&c.silos, "silos", 1, "silos in the cluster (in this process, on the first one's embedded etcd); the callers use every gateway")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&c.memprofile, "memprofile", "", "write a heap profile to this file once the memory part's conversations are deactivated")
	fs.StringVar(&c.profSeries, "cpuprofile-series", "", "with -cpuprofile: profile only the measured windows of this series (direct-loop or silo-loop), one file each, named after -cpuprofile with .1, .2, ...")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, s := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return c, fmt.Errorf("-n %q: want positive counts", *ns)
		}
		c.ns = append(c.ns, n)
	}
	for _, p := range strings.Split(*parts, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains([]string{"loop", "conversations", "memory", "approvals", "history"}, p) {
			return c, fmt.Errorf("-parts: no part %q (loop, conversations, memory, approvals, history)", p)
		}
		c.parts = append(c.parts, p)
	}
	if c.modelClient != "bench" && c.modelClient != "default" {
		return c, fmt.Errorf("-model-client %q: want bench or default", c.modelClient)
	}
	if c.profSeries != "" && (c.cpuprofile == "" || !slices.Contains([]string{"direct-loop", "silo-loop"}, c.profSeries)) {
		return c, fmt.Errorf("-cpuprofile-series %q: want direct-loop or silo-loop, with -cpuprofile", c.profSeries)
	}
	if c.rounds < 1 || c.window <= 0 || c.warmup < 0 || c.conversations < 1 || c.turns < 1 || c.history < 1 || c.silos < 1 || c.lease < 0 || c.latency < 0 || c.convLatency < 0 {
		return c, fmt.Errorf("-rounds, -window, -conversations and -turns must be positive; -warmup and the latencies not negative")
	}
	return c, nil
}

// bench is the silo, the fake model and the two ways to run a loop.
type bench struct {
	cfg   config
	srv   *fakemodel.Server
	silo  *cluster.Silo   // the first, with the embedded etcd
	more  []*cluster.Silo // the others (-silos)
	gw    *client.Client
	model openai.Client
	tr    *http.Transport
	dir   string // the etcd's data

	etcd    *clientv3.Client       // to read the etcd's revision
	loops   atomic.Int64           // silo loops answered
	counted atomic.Int64           // the direct loop's tool
	pushes  atomic.Int64           // progress pushed to the callers' session
	args    atomic.Pointer[string] // the tool call's arguments, if not toolArgs
	plain   atomic.Bool            // the model answers with text at once (the history part)
	arrived atomic.Int64           // when the model's last request arrived (UnixNano)
	seq     atomic.Int64           // conversations started
	mu      sync.Mutex
	convs   map[int]*conv // the current conversation of each caller

	profiles int       // files written for -cpuprofile-series
	stderr   io.Writer // where the windows are logged
}

// timeOfDay is how the windows' times are logged (UTC, as the silo's log).
const timeOfDay = "15:04:05.000"

// conv is a caller's current conversation and the turns it has had.
type conv struct {
	addr  string
	turns int
}

func run(ctx context.Context, args []string, out, stderr io.Writer) error {
	cfg, err := parse(args, stderr)
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, convs: make(map[int]*conv), stderr: stderr}
	// One responder, read by the server at each request: its latency is
	// the part's.
	lat := &atomic.Int64{}
	b.srv = fakemodel.NewFunc(func(r fakemodel.Request) fakemodel.Step {
		b.arrived.Store(time.Now().UnixNano())
		if b.plain.Load() {
			return fakemodel.Step{Text: plainAnswer}
		}
		args := toolArgs
		if p := b.args.Load(); p != nil {
			args = *p
		}
		return fakemodel.Loop{Tool: toolName, Arguments: args, Latency: time.Duration(lat.Load())}.Respond(r)
	})
	defer b.srv.Close()
	b.srv.SetRecording(false)
	// Both sides get the same transport settings: a connection per
	// caller kept between calls.
	maxConns := max(cfg.conversations, slices.Max(cfg.ns)) + 16
	b.tr = &http.Transport{MaxIdleConns: 2 * maxConns, MaxIdleConnsPerHost: 2 * maxConns, IdleConnTimeout: time.Minute}
	defer b.tr.CloseIdleConnections()
	hc := &http.Client{Transport: b.tr}
	b.model = openai.NewClient(option.WithBaseURL(b.srv.OpenAIURL()), option.WithAPIKey("sk-fake"), option.WithMaxRetries(0), option.WithHTTPClient(hc))

	if err := b.start(ctx, hc); err != nil {
		return err
	}
	defer func() {
		b.etcd.Close()
		b.gw.Close()
		for _, m := range b.more {
			m.Close(context.Background())
		}
		b.silo.Close(context.Background())
		os.RemoveAll(b.dir)
	}()

	if cfg.cpuprofile != "" && cfg.profSeries == "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var table [][]string
	if slices.Contains(cfg.parts, "loop") {
		lat.Store(int64(cfg.latency))
		for _, n := range cfg.ns {
			d, s, txns := b.measure(ctx, n)
			callbench.Emit(out, d, "direct-loop", d.RateMedian())
			callbench.Emit(out, s, "direct-loop", d.RateMedian())
			ratio := ratio(d.RateMedian(), s.RateMedian())
			emit(out, map[string]any{"bench": "loop-cost", "n": n, "model_latency_ms": ms(cfg.latency), "etcd_txns_per_loop": txns,
				"direct_loops_per_s": d.RateMedian(), "silo_loops_per_s": s.RateMedian(),
				"direct_ms_per_loop": perLoopMs(n, d.RateMedian()), "silo_ms_per_loop": perLoopMs(n, s.RateMedian()),
				"wall_ratio": ratio, "goal": 1.3})
			table = append(table, []string{fmt.Sprintf("loop cost, n=%d, model %v", n, cfg.latency),
				fmt.Sprintf("%.2f ms/loop", perLoopMs(n, d.RateMedian())), fmt.Sprintf("%.2f ms/loop", perLoopMs(n, s.RateMedian())),
				fmt.Sprintf("x%.2f wall per loop (goal <= 1.3)", ratio)})
		}
	}
	if slices.Contains(cfg.parts, "conversations") {
		lat.Store(int64(cfg.convLatency))
		n := cfg.conversations
		d, s, txns := b.measure(ctx, n)
		callbench.Emit(out, d, "direct-loop", d.RateMedian())
		callbench.Emit(out, s, "direct-loop", d.RateMedian())
		share := s.RateMedian() / max(d.RateMedian(), 1e-9)
		emit(out, map[string]any{"bench": "conversations", "n": n, "model_latency_ms": ms(cfg.convLatency), "etcd_txns_per_loop": txns, "pushes": b.pushes.Load(),
			"direct_steps_per_s": 3 * d.RateMedian(), "silo_steps_per_s": 3 * s.RateMedian(),
			"share": share, "goal": 0.8})
		table = append(table, []string{fmt.Sprintf("%d conversations, model %v", n, cfg.convLatency),
			fmt.Sprintf("%.0f steps/s", 3*d.RateMedian()), fmt.Sprintf("%.0f steps/s", 3*s.RateMedian()),
			fmt.Sprintf("%.0f%% of the model alone (goal >= 80%%)", 100*share)})
	}
	if slices.Contains(cfg.parts, "memory") {
		lat.Store(0)
		m, err := b.memory(ctx, cfg.conversations)
		if err != nil {
			return err
		}
		emit(out, m)
		table = append(table, []string{fmt.Sprintf("memory, %d conversations", cfg.conversations),
			fmt.Sprintf("active: %.1f KiB heap each", m["heap_kib_per_active"].(float64)),
			fmt.Sprintf("idle: %d in memory", m["idle_in_memory"].(int)),
			fmt.Sprintf("record: %.0f bytes each (stored)", m["record_bytes_mean"].(float64))})
	}
	if slices.Contains(cfg.parts, "approvals") {
		lat.Store(0)
		m, err := b.approvals(ctx, cfg.approvals)
		if err != nil {
			return err
		}
		emit(out, m)
		table = append(table, []string{fmt.Sprintf("approvals, %d turns waiting, %d silos", cfg.approvals, cfg.silos),
			fmt.Sprintf("parked in %.1f s", m["park_s"].(float64)),
			fmt.Sprintf("%d active, %.0f bytes each", m["active_while_waiting"].(int), m["record_bytes_mean"].(float64)),
			fmt.Sprintf("all approved and ended in %.1f s; %d calls run, %d lost", m["resume_s"].(float64), m["calls_run"].(int64), m["lost"].(int))})
	}
	if slices.Contains(cfg.parts, "history") {
		lat.Store(0)
		m, err := b.historyPart(ctx, cfg.history, 3*cfg.rounds+2)
		if err != nil {
			return err
		}
		emit(out, m)
		table = append(table, []string{fmt.Sprintf("first model request, %d turns before", cfg.history),
			fmt.Sprintf("new: %.2f ms", m["new_ms_median"].(float64)),
			fmt.Sprintf("continued: %.2f ms", m["continued_ms_median"].(float64)),
			fmt.Sprintf("x%.2f of a new conversation's (%d KiB record, deactivated before each)", m["ratio_median"].(float64), m["record_kib"].(int))})
	}
	fmt.Fprintf(stderr, "\n%-40s %-22s %-22s %s\n", "", "direct-loop", "silo-loop", "")
	for _, r := range table {
		fmt.Fprintf(stderr, "%-40s %-22s %-22s %s\n", r[0], r[1], r[2], r[3])
	}
	return nil
}

// start starts the silo: an embedded etcd in a temporary directory (fsync
// on, as in production), the Count type and the model type Looper.
func (b *bench) start(ctx context.Context, hc *http.Client) error {
	dir, err := os.MkdirTemp("", "llmbench-")
	if err != nil {
		return err
	}
	reg, err := b.registry(hc)
	if err != nil {
		return err
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "llmbench"
	cfg.GatewayAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
	cfg.Etcd.DataDir = dir
	if cfg.Etcd.EmbeddedAddr, err = callbench.FreeAddr(); err != nil {
		return err
	}
	if cfg.Etcd.EmbeddedPeerAddr, err = callbench.FreeAddr(); err != nil {
		return err
	}
	// Room for every conversation's call at once, and a few more.
	cfg.Gateway.Limits.MaxCallsPerPrincipal = max(cfg.Gateway.Limits.MaxCallsPerPrincipal, b.cfg.conversations+64, approvalWorkers+64)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.LeaseTTL = b.cfg.lease
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	if err := s.Start(ctx); err != nil {
		os.RemoveAll(dir)
		return err
	}
	b.silo, b.dir = s, dir
	if b.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{"http://" + cfg.Etcd.EmbeddedAddr}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()}); err != nil {
		s.Close(context.Background())
		os.RemoveAll(dir)
		return err
	}
	gateways := []string{s.GatewayAddr()}
	for i := 1; i < b.cfg.silos; i++ {
		reg, err := b.registry(hc)
		if err != nil {
			return err
		}
		mc := cluster.DefaultSiloConfig()
		mc.Name = fmt.Sprintf("llmbench-%d", i)
		mc.GatewayAddr, mc.HTTPAddr, mc.PeerAddr, mc.GossipAddr = "127.0.0.1:0", "", "127.0.0.1:0", "127.0.0.1:0"
		mc.Etcd.Endpoints = []string{"http://" + cfg.Etcd.EmbeddedAddr}
		mc.Gateway.Limits.MaxCallsPerPrincipal = cfg.Gateway.Limits.MaxCallsPerPrincipal
		mc.Logger = cfg.Logger
		mc.LeaseTTL = cfg.LeaseTTL
		m, err := cluster.NewSilo(mc, reg)
		if err == nil {
			err = m.Start(ctx)
		}
		if err != nil {
			return fmt.Errorf("silo %s: %w", mc.Name, err)
		}
		b.more = append(b.more, m)
		gateways = append(gateways, m.GatewayAddr())
	}
	// The turns push their progress to the caller's session (two a
	// loop); they are counted, as a caller that shows them would read them.
	gw, err := client.Dial(ctx, gateways, client.WithPrincipal(principal),
		client.WithOnMessage(func(*client.Message) { b.pushes.Add(1) }))
	if err != nil {
		b.etcd.Close()
		s.Close(context.Background())
		os.RemoveAll(dir)
		return err
	}
	b.gw = gw
	return nil
}

// registry is a silo's registry: the Count type and the model types.
func (b *bench) registry(hc *http.Client) (*grain.Registry, error) {
	httpOpt := llm.WithHTTPClient(hc)
	if b.cfg.modelClient == "default" {
		httpOpt = nil // the llm package's own
	}
	reg := grain.NewRegistry()
	if err := registerCount(reg); err != nil {
		return nil, err
	}
	careful, err := llm.ParseDefinition(fmt.Appendf(nil, `type: Careful
description: Counts once when asked, once a person approves.
model: {provider: openai, base_url: %s, name: fake-1}
tools:
  - agent: Count
approval: [Count_add]
`, b.srv.OpenAIURL()))
	if err != nil {
		return nil, err
	}
	if err := llm.Register(reg, careful, httpOpt, llm.WithMaxRetries(0)); err != nil {
		return nil, err
	}
	talker, err := llm.ParseDefinition(fmt.Appendf(nil, `type: Talker
description: Talks, with no tools.
model: {provider: openai, base_url: %s, name: fake-1}
`, b.srv.OpenAIURL()))
	if err != nil {
		return nil, err
	}
	if err := llm.Register(reg, talker, httpOpt, llm.WithMaxRetries(0)); err != nil {
		return nil, err
	}
	def, err := llm.ParseDefinition(fmt.Appendf(nil, `type: Looper
description: Counts once when asked.
model: {provider: openai, base_url: %s, name: fake-1}
tools:
  - agent: Count
`, b.srv.OpenAIURL()))
	if err != nil {
		return nil, err
	}
	if err := llm.Register(reg, def, httpOpt, llm.WithMaxRetries(0)); err != nil {
		return nil, err
	}
	return reg, nil
}

// measure runs the direct loop and the silo's loop with n callers, in
// interleaved rounds.
// It also returns the etcd transactions per silo loop (the etcd's
// revisions over the silo's measured windows, per loop answered in them).
func (b *bench) measure(ctx context.Context, n int) (direct, silo *callbench.Series, txns float64) {
	direct = &callbench.Series{Bench: "direct-loop", N: n}
	silo = &callbench.Series{Bench: "silo-loop", N: n}
	var revs, loops int64
	for round := range b.cfg.rounds {
		for _, s := range []struct {
			sr   *callbench.Series
			call callbench.Call
		}{{direct, b.direct}, {silo, b.siloLoop}} {
			warm := time.Now()
			if b.cfg.warmup > 0 {
				callbench.Window(ctx, n, b.cfg.warmup, nil, s.call)
			}
			rev0, loops0 := b.revision(ctx), b.loops.Load()
			stop := b.profile(s.sr.Bench)
			start := time.Now()
			callbench.Window(ctx, n, b.cfg.window, s.sr, s.call)
			stop()
			// When each window ran, to read the silo's log beside.
			fmt.Fprintf(b.stderr, "window %s n=%d round %d: warm-up from %s, measured %s to %s\n", s.sr.Bench, n, round+1,
				warm.UTC().Format(timeOfDay), start.UTC().Format(timeOfDay), time.Now().UTC().Format(timeOfDay))
			if s.sr == silo {
				revs += b.revision(ctx) - rev0
				loops += b.loops.Load() - loops0
			}
		}
	}
	if loops > 0 {
		txns = float64(revs) / float64(loops)
	}
	return direct, silo, txns
}

// profile starts a CPU profile of one measured window of series, when
// -cpuprofile-series names it, in the next numbered file; it returns what
// stops it.
func (b *bench) profile(series string) (stop func()) {
	if b.cfg.profSeries != series {
		return func() {}
	}
	b.profiles++
	f, err := os.Create(fmt.Sprintf("%s.%d", b.cfg.cpuprofile, b.profiles))
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmbench: -cpuprofile-series:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		fmt.Fprintln(os.Stderr, "llmbench: -cpuprofile-series:", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// revision is the etcd's revision: each write transaction adds one.
func (b *bench) revision(ctx context.Context) int64 {
	r, err := b.etcd.Get(ctx, "llmbench-revision")
	if err != nil {
		return 0
	}
	return r.Header.Revision
}

// direct runs one loop with openai-go alone: the model, the tool (an
// in-process count), the model again.
func (b *bench) direct(ctx context.Context, _ int) (time.Duration, error) {
	start := time.Now()
	params := openai.ChatCompletionNewParams{
		Model:    "fake-1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
		Tools:    []openai.ChatCompletionToolUnionParam{countTool},
	}
	for round := 0; ; round++ {
		if round == 8 {
			return 0, errors.New("direct loop: no answer in 8 rounds")
		}
		res, err := b.model.Chat.Completions.New(ctx, params)
		if err != nil {
			return 0, err
		}
		msg := res.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			if !strings.HasPrefix(msg.Content, "done: ") {
				return 0, fmt.Errorf("direct loop: answer %q", msg.Content)
			}
			return time.Since(start), nil
		}
		params.Messages = append(params.Messages, msg.ToParam())
		for _, c := range msg.ToolCalls {
			var in struct {
				Input countIn `json:"input"`
			}
			if err := json.Unmarshal([]byte(c.Function.Arguments), &in); err != nil {
				return 0, err
			}
			out, _ := json.Marshal(countOut{Count: b.counted.Add(in.Input.By)})
			params.Messages = append(params.Messages, openai.ToolMessage(string(out), c.ID))
		}
	}
}

// countTool is the direct loop's tool, as the model agent offers Count's
// typed skill add.
var countTool = openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
	Name:        toolName,
	Description: openai.String("adds to a count"),
	Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{
		"agent": map[string]any{"type": "string"},
		"input": map[string]any{"type": "object", "properties": map[string]any{"by": map[string]any{"type": "integer"}}},
	}},
})

// siloLoop runs one loop as a turn of a model agent: caller i's current
// conversation, or a new one when it has had its turns.
func (b *bench) siloLoop(ctx context.Context, i int) (time.Duration, error) {
	b.mu.Lock()
	c := b.convs[i]
	if c == nil || c.turns >= b.cfg.turns {
		c = &conv{addr: fmt.Sprintf("Looper:%s:c%d", principal, b.seq.Add(1))}
		b.convs[i] = c
	}
	c.turns++
	b.mu.Unlock()
	start := time.Now()
	r, err := b.gw.Ask(ctx, c.addr, &client.Message{Message: question})
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(r.Message, "done: ") {
		return 0, fmt.Errorf("%s: answer %q", c.addr, r.Message)
	}
	b.loops.Add(1)
	return time.Since(start), nil
}

// memory has n new conversations take one turn each, reads the heap with
// them active, deactivates them, and reads it again; it reads their
// stored records' sizes.
func (b *bench) memory(ctx context.Context, n int) (map[string]any, error) {
	rt := b.silo.Runtime()
	// Nothing else in memory: the conversations of the parts before go.
	if err := deactivate(ctx, rt, "Looper"); err != nil {
		return nil, err
	}
	heapIdle0 := b.heap()
	addrs := make([]string, n)
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("Looper:%s:m%d", principal, i)
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if _, err := b.gw.Ask(cctx, addrs[i], &client.Message{Message: question}); err != nil {
				errc <- err
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("memory: a turn: %w", err)
	}
	active := len(rt.Activations("Looper"))
	heapActive := b.heap()
	if err := deactivate(ctx, rt, "Looper"); err != nil {
		return nil, err
	}
	idle := len(rt.Activations("Looper"))
	heapIdle := b.heap()
	if b.cfg.memprofile != "" {
		if err := writeHeapProfile(b.cfg.memprofile); err != nil {
			return nil, err
		}
	}
	var sizes []float64
	for _, a := range addrs {
		st, err := b.gw.Agents().State(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("memory: the record of %s: %w", a, err)
		}
		sizes = append(sizes, float64(len(st.Data)))
	}
	sum := 0.0
	for _, s := range sizes {
		sum += s
	}
	return map[string]any{
		"bench": "memory", "n": n,
		"active": active, "idle_in_memory": idle,
		"heap_kib_per_active": float64(int64(heapActive)-int64(heapIdle)) / 1024 / float64(n),
		"heap_kib_idle_delta": float64(int64(heapIdle)-int64(heapIdle0)) / 1024,
		"record_bytes_mean":   sum / float64(len(sizes)),
		"record_bytes_median": callbench.Median(sizes),
	}, nil
}

// approvalWorkers bounds the approvals part's calls in flight.
const approvalWorkers = 256

// approvals parks n turns of Careful agents, each waiting for an approval
// of its call Count_add, ends their activations, reads the size of their
// records, then approves every one and waits until every turn has ended:
// the calls run (the count of the agent bench:a, which only these calls
// add to) must be n, none lost and none twice.
func (b *bench) approvals(ctx context.Context, n int) (map[string]any, error) {
	const count = "Count:bench:a"
	args := strings.Replace(toolArgs, "bench:c", "bench:a", 1)
	if args == toolArgs {
		return nil, errors.New("approvals: the tool's arguments name no bench:c")
	}
	b.args.Store(&args)
	defer b.args.Store(nil)
	pool := func(f func(i int) error) error {
		var wg sync.WaitGroup
		var next atomic.Int64
		errc := make(chan error, approvalWorkers)
		for range approvalWorkers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					if err := f(i); err != nil {
						errc <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errc)
		return <-errc
	}
	ids := make([]string, n)
	t0 := time.Now()
	err := pool(func(i int) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		r, err := b.gw.Ask(cctx, fmt.Sprintf("Careful:%s:w%d", principal, i), &client.Message{Message: question})
		if err != nil {
			return fmt.Errorf("approvals: ask: %w", err)
		}
		var req llm.ApprovalRequest
		if r.MessageType != llm.InputRequired || json.Unmarshal(r.Data, &req) != nil || len(req.Approvals) != 1 {
			return fmt.Errorf("approvals: the reply %v is no approval request", r)
		}
		ids[i] = req.Approvals[0].ID
		return nil
	})
	if err != nil {
		return nil, err
	}
	park := time.Since(t0)
	// The records' size (as the conversation skill returns them, the JSON
	// stored), then no activation left.
	record := func(i int) ([]byte, error) {
		return client.AskTyped[struct{}, json.RawMessage](ctx, b.gw, fmt.Sprintf("Careful:%s:w%d", principal, i), llm.SkillConversation, struct{}{})
	}
	var bytes atomic.Int64
	if err := pool(func(i int) error {
		data, err := record(i)
		bytes.Add(int64(len(data)))
		return err
	}); err != nil {
		return nil, fmt.Errorf("approvals: a record: %w", err)
	}
	active := 0
	for _, s := range b.silos() {
		if err := deactivate(ctx, s.Runtime(), "Careful"); err != nil {
			return nil, err
		}
	}
	for _, s := range b.silos() {
		active += len(s.Runtime().Activations("Careful"))
	}
	counted := func() (int64, error) {
		out, err := client.AskTyped[countIn, countOut](ctx, b.gw, count, "add", countIn{})
		return out.Count, err
	}
	before, err := counted()
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	if err := pool(func(i int) error {
		d, _ := json.Marshal(llm.Decision{ID: ids[i], Approve: true})
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		_, err := b.gw.Ask(cctx, strings.SplitN(ids[i], "/", 2)[0], &client.Message{MessageType: llm.SkillDecide, DataType: "application/json", Data: d})
		return err
	}); err != nil {
		return nil, fmt.Errorf("approvals: approve: %w", err)
	}
	decided := time.Since(t1)
	// Every turn goes on as its agent's next message; the count says how
	// many calls ran.
	deadline := time.Now().Add(5 * time.Minute)
	var ran int64
	for {
		c, err := counted()
		if err != nil {
			return nil, err
		}
		if ran = c - before; ran >= int64(n) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Ended: no turn left current (a turn ends after its call's result
	// reaches the model); the records read again until every one has.
	ended := make([]bool, n)
	var unfinished atomic.Int64
	for {
		unfinished.Store(0)
		if err := pool(func(i int) error {
			if ended[i] {
				return nil
			}
			data, err := record(i)
			var rec llm.Conversation
			if err == nil && json.Unmarshal(data, &rec) == nil && rec.Current == nil && len(rec.Decisions) == 1 {
				ended[i] = true
			} else {
				unfinished.Add(1)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		if unfinished.Load() == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	resume := time.Since(t1)
	if c, err := counted(); err == nil {
		ran = c - before
	}
	lost := n - int(ran)
	if ran > int64(n) {
		lost = 0
	}
	return map[string]any{
		"bench": "approvals", "n": n, "silos": len(b.silos()),
		"park_s": park.Seconds(), "active_while_waiting": active,
		"record_bytes_mean": float64(bytes.Load()) / float64(n),
		"decide_s":          decided.Seconds(), "resume_s": resume.Seconds(),
		"calls_run": ran, "twice": max(0, ran-int64(n)), "lost": lost, "unfinished_after": unfinished.Load(),
	}, nil
}

// plainAnswer is the history part's model's answer, and userTurn its
// turns' text: 100 and 200 bytes, a short exchange.
var (
	plainAnswer = strings.Repeat("an answer of a hundred bytes, ", 7)[:200]
	userTurn    = strings.Repeat("a question, ", 9)[:100]
)

// historyPart measures the time from a request to a model agent until its
// model receives the turn's first request, for an agent whose
// conversation has n turns before (continued) and for one that has none
// (new), each activated by the request (the continued one deactivated
// before each: its record is read from etcd); m samples of each,
// alternating, medians reported.
func (b *bench) historyPart(ctx context.Context, n, m int) (map[string]any, error) {
	b.plain.Store(true)
	defer b.plain.Store(false)
	rt := b.silo.Runtime()
	long := "Talker:" + principal + ":long"
	ask := func(addr string) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		t0 := time.Now()
		r, err := b.gw.Ask(cctx, addr, &client.Message{Message: userTurn})
		if err != nil {
			return 0, fmt.Errorf("history: ask %s: %w", addr, err)
		}
		if r.Message != plainAnswer {
			return 0, fmt.Errorf("history: %s answered %q", addr, r.Message)
		}
		return time.Unix(0, b.arrived.Load()).Sub(t0), nil
	}
	for i := range n {
		if _, err := ask(long); err != nil {
			return nil, fmt.Errorf("history: turn %d: %w", i+1, err)
		}
	}
	var fresh, continued []time.Duration
	for i := range m {
		if err := deactivate(ctx, rt, "Talker"); err != nil {
			return nil, err
		}
		d, err := ask(fmt.Sprintf("Talker:%s:new-%d", principal, i))
		if err != nil {
			return nil, err
		}
		fresh = append(fresh, d)
		if err := deactivate(ctx, rt, "Talker"); err != nil {
			return nil, err
		}
		if d, err = ask(long); err != nil {
			return nil, err
		}
		continued = append(continued, d)
	}
	data, err := client.AskTyped[struct{}, json.RawMessage](ctx, b.gw, long, llm.SkillConversation, struct{}{})
	if err != nil {
		return nil, err
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return ms(ds[len(ds)/2])
	}
	nm, cm := median(fresh), median(continued)
	return map[string]any{
		"bench": "history", "turns_before": n, "samples": m, "record_kib": len(data) / 1024,
		"new_ms_median": nm, "continued_ms_median": cm, "ratio_median": cm / max(nm, 1e-9),
	}, nil
}

// silos are the cluster's silos.
func (b *bench) silos() []*cluster.Silo { return append([]*cluster.Silo{b.silo}, b.more...) }

// deactivate ends every activation of typ on rt.
func deactivate(ctx context.Context, rt *grain.Runtime, typ string) error {
	for _, a := range rt.Activations(typ) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := rt.Deactivate(cctx, a.Address)
		cancel()
		if err != nil {
			return fmt.Errorf("deactivate %s: %w", a.Address, err)
		}
	}
	return nil
}

// heap is the bytes of live heap objects after a collection, without the
// model's idle connections: the parts before, and the turns here, leave up
// to one kept-alive connection per caller (client and server buffers, about
// 10 KiB each), which are the bench's HTTP pool, not the conversations'.
func (b *bench) heap() uint64 {
	b.tr.CloseIdleConnections()
	time.Sleep(200 * time.Millisecond) // the server's side sees them close
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// countIn and countOut are the Count agent's typed skill add.
type countIn struct {
	By int64 `json:"by" jsonschema:"how much to add"`
}

type countOut struct {
	Count int64 `json:"count"`
}

// counter is the tool: a count in memory (as the direct loop's), added to
// by its typed skill add.
type counter struct{ n int64 }

func registerCount(reg *grain.Registry) error {
	return reg.Register("Count", func(grain.Host) (grain.Agent, error) { return &counter{}, nil }, grain.TypeInfo{
		Description: "A count in memory.",
		Skills:      []grain.Skill{grain.TypedSkill[countIn, countOut]("add", "Adds by to the count and returns it.")},
	})
}

// OnMessage implements grain.Agent.
func (c *counter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return grain.TypedHandler(func(_ context.Context, in countIn) (countOut, error) {
		c.n += in.By
		return countOut{Count: c.n}, nil
	})(ctx, m)
}

func emit(out io.Writer, rec map[string]any) {
	data, _ := json.Marshal(rec)
	fmt.Fprintln(out, string(data))
}

// ratio is the wall time per loop of silo over direct's: direct's rate
// over silo's.
func ratio(direct, silo float64) float64 {
	if silo <= 0 {
		return 0
	}
	return direct / silo
}

// perLoopMs is the wall time per loop of n callers at rate loops a second.
func perLoopMs(n int, rate float64) float64 {
	if rate <= 0 {
		return 0
	}
	return 1000 * float64(n) / rate
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
