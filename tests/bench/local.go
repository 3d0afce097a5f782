package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// Agent types. Bench answers value+1, the value being 8 little-endian bytes
// in Data; Mem does the same and keeps 16 bytes of state, like the peer's
// "mem" grain.
const (
	typeBench = "Bench"
	typeMem   = "Mem"
	owner     = "bench"
)

type benchAgent struct{ calls int64 }

func (b *benchAgent) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	b.calls++
	return answer(m)
}

type memAgent struct{ state [2]int64 }

func (g *memAgent) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	r, err := answer(m)
	if err == nil {
		g.state[0] = int64(binary.LittleEndian.Uint64(m.Data))
		g.state[1]++
	}
	return r, err
}

var errBadValue = errors.New("want 8 bytes of data")

func answer(m *grain.Message) (*grain.Message, error) {
	if len(m.Data) != 8 {
		return nil, errBadValue
	}
	r := m.Response()
	r.Data = binary.LittleEndian.AppendUint64(make([]byte, 0, 8), binary.LittleEndian.Uint64(m.Data)+1)
	return r, nil
}

// newRuntime starts a runtime with the two bench types. Its logs below Warn
// are dropped.
func newRuntime() (*grain.Runtime, error) {
	reg := grain.NewRegistry()
	if err := reg.Register(typeBench, func(grain.Host) (grain.Agent, error) { return &benchAgent{}, nil }); err != nil {
		return nil, err
	}
	if err := reg.Register(typeMem, func(grain.Host) (grain.Agent, error) { return &memAgent{}, nil }); err != nil {
		return nil, err
	}
	cfg := grain.DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return grain.New(cfg, reg)
}

// ask makes one request to `to` with value v and checks the answer. ctx has no
// deadline, so the runtime applies its own Ask timeout, as the peer's
// cluster.Request applies its default timeout.
func ask(rt *grain.Runtime, to string, v uint64) error {
	m := &grain.Message{To: to, Data: binary.LittleEndian.AppendUint64(make([]byte, 0, 8), v)}
	r, err := rt.Ask(context.Background(), m)
	if err != nil {
		return err
	}
	if len(r.Data) != 8 || binary.LittleEndian.Uint64(r.Data) != v+1 {
		return fmt.Errorf("%s answered %x to %d", to, r.Data, v)
	}
	return nil
}

// chanReq is the channel anchor's request: a value and where to answer.
type chanReq struct {
	v     int64
	reply chan int64
}

// startChanGrains starts n goroutine "grains", each with a buffered channel
// mailbox, answering v+1 on the request's reply channel. stop ends them.
func startChanGrains(n int) (mbs []chan chanReq, stop func()) {
	mbs = make([]chan chanReq, n)
	var wg sync.WaitGroup
	for i := range mbs {
		mb := make(chan chanReq, 64)
		mbs[i] = mb
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range mb {
				m.reply <- m.v + 1
			}
		}()
	}
	return mbs, func() {
		for _, mb := range mbs {
			close(mb)
		}
		wg.Wait()
	}
}

// cursor spreads caller w of n over grains targets: it starts at its own
// offset and walks all of them in order.
func cursor(w, n, grains int) func() int {
	k := (w * (grains / max(n, 1))) % grains
	return func() int {
		i := k
		if k++; k == grains {
			k = 0
		}
		return i
	}
}

// chanCaller makes a new reply channel per request, as a request/reply
// runtime makes a future (here: a reply channel) per request.
func chanCaller(mbs []chan chanReq, n int) func(w int) callFunc {
	return func(w int) callFunc {
		next := cursor(w, n, len(mbs))
		var v int64
		return func() error {
			v++
			reply := make(chan int64, 1)
			mbs[next()] <- chanReq{v: v, reply: reply}
			if got := <-reply; got != v+1 {
				return fmt.Errorf("chan grain answered %d to %d", got, v)
			}
			return nil
		}
	}
}

func localCaller(rt *grain.Runtime, addrs []string, n int) func(w int) callFunc {
	return func(w int) callFunc {
		next := cursor(w, n, len(addrs))
		var v uint64
		return func() error {
			v++
			return ask(rt, addrs[next()], v)
		}
	}
}

// activationCaller calls an address never used before on every call.
func activationCaller(rt *grain.Runtime, n int, seq *atomic.Int64) func(w int) callFunc {
	prefix := typeBench + ":" + owner + ":act" + strconv.Itoa(n) + "-"
	return func(int) callFunc {
		return func() error {
			return ask(rt, prefix+strconv.FormatInt(seq.Add(1), 10), 1)
		}
	}
}

// addresses returns Type:bench:<prefix>0 .. <prefix>(n-1).
func addresses(typ, prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = typ + ":" + owner + ":" + prefix + strconv.Itoa(i)
	}
	return out
}

// activateAll asks every address once with par concurrent callers and
// returns the time it took.
func activateAll(rt *grain.Runtime, addrs []string, par int) (time.Duration, error) {
	start := time.Now()
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(addrs)) {
					return
				}
				if err := ask(rt, addrs[i], uint64(i)); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("activate %s: %w", addrs[i], err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), first
}

// localFlags are the knobs of the local suite; defaults match the peer's.
type localFlags struct {
	rounds     int
	warmup     time.Duration
	window     time.Duration
	grains     int
	ns         []int
	actWindows int
	run        string
	yield      bool
	prof       profFlags
	nodeB      []string // remote: flags for node-b
	peerTLS    bool     // remote: also a pair of silos with mutual TLS
	only       string   // remote: measure this row alone (for a profile of it)
}

func parseLocalFlags(args []string) (*localFlags, error) {
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	lf := &localFlags{}
	fs.IntVar(&lf.rounds, "rounds", 5, "interleaved rounds per N (one chan window and one local window each)")
	fs.DurationVar(&lf.warmup, "warmup", 250*time.Millisecond, "unmeasured warm-up before each window")
	fs.DurationVar(&lf.window, "window", time.Second, "measured window")
	fs.IntVar(&lf.grains, "grains", 1000, "pre-activated agents (and channel grains) the callers spread over")
	fs.IntVar(&lf.actWindows, "activation-windows", 3, "measured windows per N of the activation bench (0: skip)")
	fs.Func("n", "comma-separated caller counts (default 1,64)", func(s string) error {
		ns, err := parseCounts(s)
		lf.ns = ns
		return err
	})
	fs.StringVar(&lf.run, "run", "", "run stamp to put in every JSON line")
	fs.BoolVar(&lf.yield, "yield", false, "experiment: callers call runtime.Gosched between calls (not part of the peer's method)")
	lf.prof.register(fs)
	fs.BoolVar(&lf.peerTLS, "peer-tls", false, "remote: also run a second pair of silos with peer mutual TLS, and measure its cross-silo Ask against the plain pair's, interleaved")
	fs.StringVar(&lf.only, "only", "", "remote: measure only this row (grpc-stream, grpc-env, grpc-env-batch or remote), e.g. for a profile of it alone")
	fs.Func("node-b-cpuprofile", "remote: write a CPU profile of node-b to this file", func(s string) error {
		lf.nodeB = append(lf.nodeB, "-cpuprofile", s)
		return nil
	})
	fs.Func("node-b-memprofile", "remote: write a heap profile of node-b (after the measured part) to this file", func(s string) error {
		lf.nodeB = append(lf.nodeB, "-memprofile", s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if len(lf.ns) == 0 {
		lf.ns = []int{1, 64}
	}
	if lf.grains < 1 || lf.rounds < 1 {
		return nil, errors.New("-grains and -rounds must be at least 1")
	}
	return lf, nil
}

func parseCounts(s string) ([]int, error) {
	var out []int
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			v, err := strconv.Atoi(s[start:i])
			if err != nil || v < 1 {
				return nil, fmt.Errorf("bad caller count %q", s[start:i])
			}
			out = append(out, v)
			start = i + 1
		}
	}
	return out, nil
}

// runLocal is the local suite: chan vs local interleaved for each N, then the
// activation rate.
func runLocal(args []string, out io.Writer) error {
	lf, err := parseLocalFlags(args)
	if err != nil {
		return err
	}
	mbs, stopChans := startChanGrains(lf.grains)
	defer stopChans()
	rt, err := newRuntime()
	if err != nil {
		return err
	}
	defer closeRuntime(rt)
	addrs := addresses(typeBench, "g", lf.grains)
	d, err := activateAll(rt, addrs, 8)
	if err != nil {
		return err
	}
	logf("local: %d agents pre-activated in %v", len(addrs), d.Round(time.Millisecond))

	stopProf, err := lf.prof.start()
	if err != nil {
		return err
	}
	defer stopProf()
	for _, n := range lf.ns {
		anchor := &series{bench: "chan", n: n}
		subject := &series{bench: "local", n: n, anchor: "chan"}
		interleave(lf.rounds, lf.warmup, lf.window, lf.yield, n, anchor, subject,
			chanCaller(mbs, n), localCaller(rt, addrs, n))
		emit(out, anchor.row(lf.run))
		emit(out, subject.row(lf.run))
	}
	var seq atomic.Int64
	for _, n := range lf.ns {
		if lf.actWindows < 1 {
			break
		}
		s := &series{bench: "activation", n: n, anchor: "chan"}
		for i := range lf.actWindows {
			w := runWindow(n, lf.warmup, lf.window, activationCaller(rt, n, &seq))
			s.add(w)
			logf("activation n=%d window %d/%d: %.0f/s", n, i+1, lf.actWindows, w.rate)
		}
		emit(out, s.row(lf.run))
	}
	logf("local: %d activations in all", rt.Len())
	return nil
}

func closeRuntime(rt *grain.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Close(ctx); err != nil {
		logf("close: %v", err)
	}
}

// memRow is the memory suite's JSON line, with the peer's fields.
type memRow struct {
	Bench           string  `json:"bench"`
	BytesPerGrain   float64 `json:"bytes_per_grain"`
	Grains          int     `json:"grains"`
	ActivationsPerS float64 `json:"activations_per_s"`
	HeapBefore      uint64  `json:"heap_before"`
	HeapAfter       uint64  `json:"heap_after"`
	Goroutines      int     `json:"goroutines"`
	Run             string  `json:"run,omitempty"`
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// runMemory is the memory suite (run it in a fresh process): heap bytes per
// idle activation and the activation rate.
func runMemory(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("memory", flag.ContinueOnError)
	grains := fs.Int("grains", 100_000, "agents to activate")
	par := fs.Int("par", 64, "concurrent activating callers")
	run := fs.String("run", "", "run stamp to put in the JSON line")
	var pf profFlags
	pf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *grains < 1 || *par < 1 {
		return errors.New("-grains and -par must be at least 1")
	}
	rt, err := newRuntime()
	if err != nil {
		return err
	}
	defer closeRuntime(rt)
	// A few warm-up activations, counted in neither reading.
	if _, err := activateAll(rt, addresses(typeMem, "warm", 4), 4); err != nil {
		return err
	}
	// The address strings are built before the first reading and kept until
	// after the second: what is measured is what the runtime holds.
	addrs := addresses(typeMem, "m", *grains)
	stopProf, err := pf.start()
	if err != nil {
		return err
	}
	before := heapAlloc()
	g0 := runtime.NumGoroutine()
	d, err := activateAll(rt, addrs, *par)
	if err != nil {
		stopProf()
		return err
	}
	after := heapAlloc()
	g1 := runtime.NumGoroutine()
	stopProf() // the heap profile is written while the agents are live
	runtime.KeepAlive(addrs)
	r := memRow{
		Bench:           "memory",
		BytesPerGrain:   round((float64(after)-float64(before))/float64(*grains), 1),
		Grains:          *grains,
		ActivationsPerS: round(float64(*grains)/d.Seconds(), 0),
		HeapBefore:      before,
		HeapAfter:       after,
		Goroutines:      g1 - g0,
		Run:             *run,
	}
	logf("memory: %d agents in %v, heap %d -> %d bytes, %.0f B/agent, %d goroutines more",
		*grains, d.Round(time.Millisecond), before, after, r.BytesPerGrain, r.Goroutines)
	emit(out, r)
	return nil
}
