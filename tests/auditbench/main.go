// Command auditbench measures what the audit log costs, in one run: two
// silos in this process, each on an embedded etcd of its own (fsync on),
// one with the audit on and one with it off (the anchor), measured in
// interleaved windows:
//
//   - tool-ask: an SDK Ask to a declared model agent whose turn makes one
//     tool call (a fake model on loopback asks for Count_add, then answers
//     with its result): two model calls, one tool call, one audit record;
//   - a2a-task: a blocking A2A send (JSON-RPC, the official a2a-go client)
//     to the demo Echo agent: one task, one audit record.
//
// Each caller has an agent of its own. Output: one JSON line per series
// (the fields of tests/internal/callbench, ratio_median being its rate
// over the anchor's), then per bench a line with "cost": the anchor's
// median rate over the audited one's (wall time per call with the audit
// over without; the goal is at most 1.1).
//
// Usage: go run ./tests/auditbench [-rounds 5] [-window 3s] [-n 1] [-bench a2a-task]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
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
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/tests/internal/callbench"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "auditbench:", err)
		os.Exit(1)
	}
}

type countIn struct {
	By int64 `json:"by" jsonschema:"how much to add"`
}

type countOut struct {
	Count int64 `json:"count"`
}

type counter struct{ n int64 }

func (c *counter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return grain.TypedHandler(func(_ context.Context, in countIn) (countOut, error) {
		c.n += in.By
		return countOut{Count: c.n}, nil
	})(ctx, m)
}

// side is one silo and its callers.
type side struct {
	name    string
	silo    *cluster.Silo
	gw      *client.Client
	a2a     []*a2aclient.Client
	closers []func()
}

func (s *side) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

func start(ctx context.Context, name string, auditOff bool, modelURL string, maxN int) (*side, error) {
	s := &side{name: name}
	dir, err := os.MkdirTemp("", "auditbench-")
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { os.RemoveAll(dir) })
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		return s, err
	}
	if err := reg.Register("Count", func(grain.Host) (grain.Agent, error) { return &counter{}, nil }, grain.TypeInfo{
		Description: "A count in memory.",
		Skills:      []grain.Skill{grain.TypedSkill[countIn, countOut]("add", "Adds by to the count and returns it.")},
	}); err != nil {
		return s, err
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = name
	cfg.GatewayAddr, cfg.HTTPAddr, cfg.A2A.Addr = "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.PeerAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.LLM.AllowPrivateNetworks = true
	cfg.Audit.Off = auditOff
	cfg.Etcd.DataDir = dir
	if cfg.Etcd.EmbeddedAddr, err = callbench.FreeAddr(); err != nil {
		return s, err
	}
	if cfg.Etcd.EmbeddedPeerAddr, err = callbench.FreeAddr(); err != nil {
		return s, err
	}
	cfg.Gateway.Limits.MaxCallsPerPrincipal = max(cfg.Gateway.Limits.MaxCallsPerPrincipal, 4*maxN+64)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if s.silo, err = cluster.NewSilo(cfg, reg); err != nil {
		return s, err
	}
	if err := s.silo.Start(ctx); err != nil {
		return s, err
	}
	s.closers = append(s.closers, func() { s.silo.Close(context.Background()) })
	if s.gw, err = client.Dial(ctx, []string{s.silo.GatewayAddr()}, client.WithPrincipal("system")); err != nil {
		return s, err
	}
	s.closers = append(s.closers, func() { s.gw.Close() })
	def := fmt.Sprintf("type: Looper\ndescription: Counts once when asked.\nmodel: {provider: openai, base_url: %s, name: fake-1}\ntools:\n  - agent: Count\n", modelURL)
	if _, err := s.gw.Admin().ApplyType(ctx, []byte(def)); err != nil {
		return s, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * maxN}
	s.closers = append(s.closers, tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	for i := range maxN {
		card, err := (&agentcard.Resolver{Client: hc}).Resolve(ctx, "http://"+s.silo.A2AAddr(), agentcard.WithPath(fmt.Sprintf("/a2a/Echo/system/b%d/.well-known/agent-card.json", i)))
		if err != nil {
			return s, err
		}
		c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc),
			a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []spec.TransportProtocol{spec.TransportProtocolJSONRPC}}))
		if err != nil {
			return s, err
		}
		s.closers = append(s.closers, func() { c.Destroy() })
		s.a2a = append(s.a2a, c)
	}
	return s, nil
}

func (s *side) toolAsk(ctx context.Context, i int) (time.Duration, error) {
	begin := time.Now()
	r, err := s.gw.Ask(ctx, fmt.Sprintf("Looper:system:c%d", i), &client.Message{Message: "add one"})
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(r.Message, "done: ") {
		return 0, fmt.Errorf("answer %q", r.Message)
	}
	return time.Since(begin), nil
}

func (s *side) a2aTask(ctx context.Context, i int) (time.Duration, error) {
	begin := time.Now()
	res, err := s.a2a[i].SendMessage(ctx, &spec.SendMessageRequest{Message: spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart("ping"))})
	if err != nil {
		return 0, err
	}
	if t, ok := res.(*spec.Task); !ok || t.Status.State != spec.TaskStateCompleted {
		return 0, fmt.Errorf("not completed: %v", res)
	}
	return time.Since(begin), nil
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("auditbench", flag.ContinueOnError)
	rounds := fs.Int("rounds", 5, "interleaved rounds")
	warm := fs.Duration("warmup", 500*time.Millisecond, "unmeasured warm-up before each window")
	win := fs.Duration("window", 3*time.Second, "measured window")
	nsFlag := fs.String("n", "1", "comma-separated caller counts")
	only := fs.String("bench", "", "run only this bench (tool-ask or a2a-task); empty: both")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ns []int
	for _, f := range strings.Split(*nsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-n %q: want positive counts", *nsFlag)
		}
		ns = append(ns, n)
	}
	maxN := slices.Max(ns)
	srv := fakemodel.NewFunc(fakemodel.Loop{Tool: "Count_add", Arguments: `{"agent": "c", "input": {"by": 1}}`}.Respond)
	defer srv.Close()
	ctx := context.Background()
	on, err := start(ctx, "audit-on", false, srv.OpenAIURL(), maxN)
	if on != nil {
		defer on.close()
	}
	if err != nil {
		return fmt.Errorf("silo with the audit: %w", err)
	}
	off, err := start(ctx, "audit-off", true, srv.OpenAIURL(), maxN)
	if off != nil {
		defer off.close()
	}
	if err != nil {
		return fmt.Errorf("silo without the audit: %w", err)
	}
	benches := []struct {
		name string
		call func(*side) callbench.Call
	}{
		{"tool-ask", func(s *side) callbench.Call { return s.toolAsk }},
		{"a2a-task", func(s *side) callbench.Call { return s.a2aTask }},
	}
	for _, b := range benches {
		if *only != "" && b.name != *only {
			continue
		}
		for _, n := range ns {
			sOn := &callbench.Series{Bench: b.name + "/audit", N: n}
			sOff := &callbench.Series{Bench: b.name + "/no-audit", N: n}
			for r := range *rounds {
				order := []struct {
					s  *side
					sr *callbench.Series
				}{{off, sOff}, {on, sOn}}
				if r%2 == 1 {
					slices.Reverse(order)
				}
				for _, o := range order {
					callbench.Window(ctx, n, *warm, nil, b.call(o.s))
					callbench.Window(ctx, n, *win, o.sr, b.call(o.s))
					fmt.Fprintf(os.Stderr, "auditbench: %s n=%d round %d %s done\n", b.name, n, r+1, o.s.name)
				}
			}
			callbench.Emit(out, sOff, b.name+"/no-audit", sOff.RateMedian())
			callbench.Emit(out, sOn, b.name+"/no-audit", sOff.RateMedian())
			cost := 0.0
			if r := sOn.RateMedian(); r > 0 {
				cost = sOff.RateMedian() / r
			}
			line, _ := json.Marshal(map[string]any{"bench": b.name, "n": n, "cost": cost, "goal": 1.1, "rate_audit": sOn.RateMedian(), "rate_no_audit": sOff.RateMedian()})
			fmt.Fprintln(out, string(line))
		}
	}
	return nil
}
