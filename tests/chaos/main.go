// Command chaos runs a random schedule of faults against a three-silo
// cluster under load, for a given time, and checks the invariants that
// must hold through all of it.
//
//	go run ./tests/chaos -duration 10m
//
// The cluster: three silo processes (tests/testcluster) on a three-member
// etcd of real etcd processes (Debian's etcd-server), each silo in a
// network namespace of its own when the program runs as root (-netns,
// the default then), so that partitions are real (nftables); without
// root, partitions are the silos' in-process fault injection (cut off
// from peers, not from etcd), and the program says so.
//
// Faults, one at a time, chosen at random (-seed) with a random pause
// (-gap, ±50%) between them:
//
//   - kill: kill -9 of a silo, restarted after 0-3 s;
//   - stop: SIGSTOP of a silo for 1-6 s, then SIGCONT (a hung host: the
//     silo fences itself and starts a new silo in its process);
//   - cut: a partition of one silo from its peers for 2-8 s (drop, reset
//     or one-way loss with -netns; the fault-injection endpoint without);
//   - etcd: kill -9 of the etcd leader, restarted after 1-4 s.
//   - nats: with -topic-store nats (topics on NATS JetStream, a
//     nats-server the program starts), kill -9 of nats-server, restarted
//     after 1-4 s on its store.
//
// After each fault the program waits until the three silos agree on the
// members again. Load meanwhile, each through SDK clients that know every
// gateway:
//
//   - Asks (-clients clients, two workers each) to 120 Journal agents,
//     each bounded by -ask-timeout; outcomes counted by gRPC code;
//   - state: four workers, each incrementing a Counter of its own (the
//     count kept in the state store); a reply not above the worker's
//     previous one is a state regression;
//   - keyed: -keyed workers, each incrementing a Counter of its own with
//     an idempotency key per increment, retrying a failed key with the
//     same key until it is answered OK or AlreadyExists (applied
//     already), then taking the next key. Each key must be applied
//     exactly once: an OK reply must be the count of keys answered so
//     far, and at the end each counter must hold exactly the number of
//     its keys. A count above is a double, below a loss;
//   - reminders: a Ticker registered every 2 s (period 1 s) for the whole
//     run; at the end each must still tick (its count rises within 20 s);
//     one that does not is a lost reminder;
//   - publish: a steady publisher (each message retried with its
//     idempotency key until published; every 50th is "poison") to a
//     topic two TopicSink agents subscribe to (two members of one
//     subscription); at the end every published id must be acknowledged
//     or dead-lettered within 2 minutes; one that is neither is a lost
//     message; and the subscription must get the messages for the first
//     time in publish order, whichever member gets each (one out of order
//     counts).
//
// At the end the faults stop, the cluster heals, and the journal is
// checked for overlapping activations (single activation). Output: the
// summary as one JSON object on stdout (bench "chaos"); progress on
// stderr. The exit status is 1 if an invariant broke (overlaps, lost
// reminders, lost messages, state regressions, keyed doubles or losses) or
// the cluster did not recover, 0 otherwise.
//
// -faults chooses the kinds of fault (default all four, and nats with
// -topic-store nats); -faults etcd kills only etcd leaders.
//
// With TESTCLUSTER_KEEP=1 the silos' logs and the journal are kept, and
// -check DIR checks such a directory again, from its files alone (after a
// change to the checker, say): it prints each overlap and exits 1 if there
// is one.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

type config struct {
	duration   time.Duration
	gap        time.Duration
	clients    int
	askTimeout time.Duration
	netns      bool
	seed       uint64
	keyed      int
	faults     []string
	nats       bool
}

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 10*time.Minute, "how long the faults go on")
	flag.DurationVar(&cfg.gap, "gap", 4*time.Second, "mean pause between the end of one fault and the next (±50%)")
	flag.IntVar(&cfg.clients, "clients", 4, "SDK clients of the Ask load (two workers each)")
	flag.DurationVar(&cfg.askTimeout, "ask-timeout", 5*time.Second, "deadline of each Ask of the load")
	flag.BoolVar(&cfg.netns, "netns", os.Geteuid() == 0, "silos in network namespaces, partitions with nftables (needs root)")
	seed := flag.Int64("seed", 0, "seed of the schedule (0: from the clock)")
	flag.IntVar(&cfg.keyed, "keyed", 20, "workers of keyed increments, each on a Counter of its own")
	faults := flag.String("faults", "", "the kinds of fault, comma-separated: kill, stop, cut, etcd, nats (default all but nats; with -topic-store nats, all)")
	topicStore := flag.String("topic-store", "etcd", "where topics are kept: etcd, or nats (a nats-server the program starts, Debian's nats-server)")
	check := flag.String("check", "", "check the journal of a cluster directory kept by TESTCLUSTER_KEEP=1, and exit")
	flag.Parse()
	if *check != "" {
		acts, over, err := testcluster.CheckDir(*check)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			os.Exit(1)
		}
		for _, o := range over {
			fmt.Println(o)
		}
		fmt.Printf("%d activations, %d overlapping pairs\n", len(acts), len(over))
		if len(over) > 0 {
			os.Exit(1)
		}
		return
	}
	switch *topicStore {
	case "etcd":
	case "nats":
		cfg.nats = true
	default:
		fmt.Fprintf(os.Stderr, "chaos: -topic-store: %q is not etcd or nats\n", *topicStore)
		os.Exit(2)
	}
	if *faults == "" {
		*faults = "kill,stop,cut,etcd"
		if cfg.nats {
			*faults += ",nats"
		}
	}
	for _, k := range strings.Split(*faults, ",") {
		if k = strings.TrimSpace(k); k != "" {
			if !slices.Contains([]string{"kill", "stop", "cut", "etcd", "nats"}, k) {
				fmt.Fprintf(os.Stderr, "chaos: -faults: unknown kind %q (want kill, stop, cut, etcd, nats)\n", k)
				os.Exit(2)
			}
			if k == "nats" && !cfg.nats {
				fmt.Fprintln(os.Stderr, "chaos: -faults nats needs -topic-store nats")
				os.Exit(2)
			}
			cfg.faults = append(cfg.faults, k)
		}
	}
	if cfg.duration <= 0 || cfg.gap <= 0 || cfg.clients < 1 || cfg.askTimeout <= 0 || cfg.keyed < 0 || len(cfg.faults) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano()
	}
	cfg.seed = uint64(*seed)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer testcluster.Cleanup()
	var sum summary
	failed := testcluster.Run(ctx, func(tb testcluster.TB) {
		sum = run(tb, cfg)
	})
	b, err := json.Marshal(sum)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(b))
	if failed || !sum.Recovered || sum.broken() {
		testcluster.Cleanup()
		os.Exit(1)
	}
}

type summary struct {
	Bench     string         `json:"bench"`
	Seed      uint64         `json:"seed"`
	DurationS float64        `json:"duration_s"`
	Netns     bool           `json:"netns"`
	Faults    map[string]int `json:"faults"`
	Asks      map[string]int `json:"asks"`
	// AsksMayHaveRun counts the failed Asks whose error says they may have
	// run (they were in flight on a silo that died or was cut off); the
	// rest failed before reaching any agent, or by their deadline.
	AsksMayHaveRun int `json:"asks_may_have_run"`
	// AskErrors is a sample of the failed Asks' errors: up to five
	// distinct messages per code (and per code of those that may have
	// run), agent addresses left in.
	AskErrors     map[string][]string `json:"ask_errors"`
	Overlaps      int                 `json:"overlaps"`
	Activations   int                 `json:"activations"`
	Reminders     int                 `json:"reminders"`
	RemindersLost int                 `json:"reminders_lost"`
	Published     int                 `json:"published"`
	MessagesLost  int                 `json:"messages_lost"`
	// OutOfOrder counts the messages the subscription got for the first
	// time (to any member) after one published later by the same
	// publisher.
	OutOfOrder       int            `json:"out_of_order"`
	DeadLettered     int            `json:"dead_lettered"`
	StateReplies     int64          `json:"state_replies"`
	StateFailed      map[string]int `json:"state_failed"`
	StateRegressions int            `json:"state_regressions"`
	// Keyed: the keyed increments answered (OK or AlreadyExists), the
	// attempts that failed (by code; each was retried with its key), and
	// the increments applied twice or lost.
	KeyedKeys    int64               `json:"keyed_keys"`
	KeyedFailed  map[string]int      `json:"keyed_failed"`
	KeyedErrors  map[string][]string `json:"keyed_errors"`
	KeyedDoubles int64               `json:"keyed_doubles"`
	KeyedLost    int64               `json:"keyed_lost"`
	SiloRSSMaxMB float64             `json:"silo_rss_max_mb"`
	Recovered    bool                `json:"recovered"`
	Load1        string              `json:"loadavg_end"`
}

func (s summary) broken() bool {
	return s.Overlaps > 0 || s.RemindersLost > 0 || s.MessagesLost > 0 || s.OutOfOrder > 0 || s.StateRegressions > 0 ||
		s.KeyedDoubles > 0 || s.KeyedLost > 0
}

// counts counts outcomes by name, safely, with a sample of the errors.
type counts struct {
	mu         sync.Mutex
	m          map[string]int
	mayHaveRun int
	sample     map[string][]string
}

func (c *counts) add(err error) {
	k := "OK"
	if err != nil {
		k = errs.Code(err).String()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
	if err == nil {
		return
	}
	msg := err.Error()
	if strings.Contains(msg, "may have run") {
		c.mayHaveRun++
		k += " (may have run)"
	}
	if c.sample == nil {
		c.sample = map[string][]string{}
	}
	if ms := c.sample[k]; len(ms) < 5 && !slices.Contains(ms, msg) {
		c.sample[k] = append(ms, msg)
	}
}

func (c *counts) errors() (int, map[string][]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mayHaveRun, maps.Clone(c.sample)
}

func (c *counts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// gateways returns every silo, starting at i.
func gateways(c *testcluster.Cluster, i int) []int {
	var order []int
	for j := range c.Len() {
		order = append(order, (i+j)%c.Len())
	}
	return order
}

func run(tb testcluster.TB, cfg config) summary {
	sum := summary{Bench: "chaos", Seed: cfg.seed, Netns: cfg.netns, Faults: map[string]int{}}
	if !cfg.netns {
		tb.Logf("chaos: not in network namespaces (run as root for real partitions): partitions are the silos' in-process fault injection")
	}
	c := testcluster.Start(tb, testcluster.Options{
		Silos: 3, EtcdMembers: 3, Netns: cfg.netns, NATS: cfg.nats,
		Args: []string{"--min-reminder-period", "1s", "--topic-retry-min", "20ms", "--topic-retry-max", "500ms"},
	})
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed>>1|1))
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup

	// Asks.
	var asks counts
	addrs := make([]string, 120)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("Journal:%s:chaos-%d", testcluster.Principal, i)
	}
	for k := range cfg.clients {
		cl := c.Client(tb, gateways(c, k)...)
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := k*2 + w; loadCtx.Err() == nil; n++ {
					cctx, cancel := context.WithTimeout(loadCtx, cfg.askTimeout)
					_, err := cl.Ask(cctx, addrs[(n*7)%len(addrs)], &client.Message{Message: "load"})
					cancel()
					if loadCtx.Err() != nil {
						return
					}
					asks.add(err)
				}
			}()
		}
	}

	// State: a Counter per worker, whose replies must only grow.
	var stateFailed counts
	var stateOK, regressions atomic.Int64
	var regressed sync.Map
	for w := range 4 {
		cl := c.Client(tb, gateways(c, w)...)
		addr := fmt.Sprintf("Counter:%s:chaos-%d-%d", testcluster.Principal, cfg.seed%100000, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev int64
			for loadCtx.Err() == nil {
				cctx, cancel := context.WithTimeout(loadCtx, cfg.askTimeout)
				r, err := cl.Ask(cctx, addr, &client.Message{Message: "inc"})
				cancel()
				if loadCtx.Err() != nil {
					return
				}
				if err != nil {
					stateFailed.add(err)
					pause(loadCtx, 20*time.Millisecond)
					continue
				}
				n, perr := strconv.ParseInt(r.Message, 10, 64)
				if perr != nil || n <= prev {
					regressions.Add(1)
					regressed.Store(fmt.Sprintf("%s: %q after %d", addr, r.Message, prev), true)
				}
				prev = max(prev, n)
				stateOK.Add(1)
			}
		}()
	}

	// Keyed: a Counter per worker, each increment under a key of its own.
	keyed := make([]*testcluster.KeyedCounter, cfg.keyed)
	for w := range keyed {
		kw := testcluster.NewKeyedCounter(
			fmt.Sprintf("Counter:%s:chaos-keyed-%d-%d", testcluster.Principal, cfg.seed%100000, w),
			fmt.Sprintf("chaos-%d-%d", cfg.seed%100000, w))
		keyed[w] = kw
		cl := c.Client(tb, gateways(c, w)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			kw.Run(loadCtx, cl, cfg.askTimeout)
		}()
	}

	// Reminders: a Ticker registered every 2 s.
	var tmu sync.Mutex
	var tickers []string
	{
		cl := c.Client(tb, gateways(c, 1)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; loadCtx.Err() == nil; k++ {
				addr := fmt.Sprintf("Ticker:%s:chaos-%d-%d", testcluster.Principal, cfg.seed%100000, k)
				for loadCtx.Err() == nil {
					cctx, cancel := context.WithTimeout(loadCtx, cfg.askTimeout)
					_, err := cl.Ask(cctx, addr, &client.Message{Message: "start 1s"})
					cancel()
					if err == nil {
						tmu.Lock()
						tickers = append(tickers, addr)
						tmu.Unlock()
						break
					}
					pause(loadCtx, 200*time.Millisecond)
				}
				pause(loadCtx, 2*time.Second)
			}
		}()
	}

	// Publish: two sinks subscribed to chaos.#; a steady publisher.
	sub := fmt.Sprintf("chaos%d", cfg.seed%100000)
	ctl := c.Client(tb, gateways(c, 2)...)
	for k := range 2 {
		sink := fmt.Sprintf("%s:%s:chaos-%d-%d", demoagents.TopicSinkType, testcluster.Principal, cfg.seed%100000, k)
		if err := retryCall(tb.Context(), func(ctx context.Context) error {
			_, err := ctl.Topics().Subscribe(ctx, sink, sub, sub+".#")
			return err
		}); err != nil {
			tb.Fatalf("chaos: subscribe %s: %v", sink, err)
		}
	}
	var pmu sync.Mutex
	var published []string
	poisoned := 0
	{
		pub := c.Client(tb, gateways(c, 0)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; loadCtx.Err() == nil; i++ {
				text := strconv.Itoa(i)
				if i%50 == 49 {
					text = "poison"
				}
				m := &client.Message{Message: text, IdempotencyKey: fmt.Sprintf("%s-%d", sub, i)}
				for loadCtx.Err() == nil {
					cctx, cancel := context.WithTimeout(loadCtx, cfg.askTimeout)
					r, err := pub.Topics().Publish(cctx, sub+".ticks", m)
					cancel()
					if err == nil {
						pmu.Lock()
						published = append(published, r.ID)
						if text == "poison" {
							poisoned++
						}
						pmu.Unlock()
						break
					}
					pause(loadCtx, 50*time.Millisecond)
				}
				pause(loadCtx, 20*time.Millisecond)
			}
		}()
	}

	// Silo RSS.
	var rssMax atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for loadCtx.Err() == nil {
			for i := range c.Len() {
				if kb := rssKB(c.PID(i)); kb > rssMax.Load() {
					rssMax.Store(kb)
				}
			}
			select {
			case <-loadCtx.Done():
			case <-t.C:
			}
		}
	}()

	// Faults.
	kinds := cfg.faults
	start := time.Now()
	e := c.Etcd()
	for time.Since(start) < cfg.duration && tb.Context().Err() == nil {
		kind := kinds[rng.IntN(len(kinds))]
		victim := rng.IntN(c.Len())
		name := c.Silo(victim).Name
		sum.Faults[kind]++
		switch kind {
		case "kill":
			tb.Logf("chaos %v: kill -9 %s", since(start), name)
			c.Kill(victim)
			pause(tb.Context(), jitter(rng, 0, 3*time.Second))
			c.Restart(victim)
		case "stop":
			d := jitter(rng, time.Second, 6*time.Second)
			tb.Logf("chaos %v: SIGSTOP %s for %v", since(start), name, d)
			c.Freeze(victim)
			pause(tb.Context(), d)
			c.Thaw(victim)
		case "cut":
			d := jitter(rng, 2*time.Second, 8*time.Second)
			if cfg.netns {
				how := []testcluster.Cut{testcluster.Drop, testcluster.Reset, testcluster.OneWay}[rng.IntN(3)]
				tb.Logf("chaos %v: cut %s (%v) for %v", since(start), name, how, d)
				c.Cut(victim, how)
				pause(tb.Context(), d)
				c.Cut(victim, testcluster.Heal)
			} else {
				tb.Logf("chaos %v: partition %s (in-process) for %v", since(start), name, d)
				c.Partition(victim, true)
				pause(tb.Context(), d)
				if c.Running(victim) {
					c.Partition(victim, false)
				}
			}
		case "etcd":
			leader := e.Leader()
			tb.Logf("chaos %v: kill -9 the etcd leader (member %d)", since(start), leader)
			e.Kill(leader)
			pause(tb.Context(), jitter(rng, time.Second, 4*time.Second))
			e.Restart(leader)
		case "nats":
			tb.Logf("chaos %v: kill -9 nats-server", since(start))
			c.KillNATS()
			pause(tb.Context(), jitter(rng, time.Second, 4*time.Second))
			c.RestartNATS()
		}
		recover3(tb, c)
		pause(tb.Context(), jitter(rng, cfg.gap/2, cfg.gap*3/2))
	}
	sum.DurationS = float64(time.Since(start).Round(time.Second)) / float64(time.Second)

	// Heal and check.
	recover3(tb, c)
	sum.Recovered = true
	tb.Logf("chaos: faults over after %v; the cluster agrees on its members; checking", since(start))
	pause(tb.Context(), 5*time.Second) // load on the healed cluster: a phase's length
	stopLoad()
	wg.Wait()
	sum.Asks = asks.snapshot()
	sum.AsksMayHaveRun, sum.AskErrors = asks.errors()
	sum.StateReplies = stateOK.Load()
	sum.StateFailed = stateFailed.snapshot()
	sum.StateRegressions = int(regressions.Load())
	regressed.Range(func(k, _ any) bool { tb.Logf("chaos: state regression: %v", k); return true })
	{
		cl := c.Client(tb, gateways(c, 0)...)
		var failed counts
		for _, kw := range keyed {
			kw.Check(tb, cl)
			r := kw.Result()
			sum.KeyedKeys += r.Keys
			sum.KeyedDoubles += r.Doubles
			sum.KeyedLost += r.Lost
			for _, err := range r.Failed {
				failed.add(err)
			}
			for _, l := range r.Report {
				tb.Logf("chaos: keyed: %s", l)
			}
		}
		sum.KeyedFailed = failed.snapshot()
		_, sum.KeyedErrors = failed.errors()
	}
	sum.SiloRSSMaxMB = float64(rssMax.Load()) / 1024

	tmu.Lock()
	sum.Reminders = len(tickers)
	lost := tickersLost(tb, c, tickers)
	tmu.Unlock()
	sum.RemindersLost = len(lost)
	for _, a := range lost {
		tb.Logf("chaos: reminder lost: %s no longer ticks", a)
	}

	pmu.Lock()
	sum.Published = len(published)
	missing, dead := messagesLost(tb, c, ctl, sub, published)
	sum.OutOfOrder = outOfOrder(tb, c, sub, published)
	pmu.Unlock()
	sum.MessagesLost = len(missing)
	sum.DeadLettered = dead
	if len(missing) > 0 {
		tb.Logf("chaos: %d messages neither acknowledged nor dead-lettered, e.g. %v", len(missing), missing[:min(len(missing), 10)])
	}
	if dead < poisoned {
		tb.Logf("chaos: %d dead letters, %d poison messages published", dead, poisoned)
	}

	acts, err := testcluster.ReadJournal(c.Journal(), c.Lives())
	if err != nil {
		tb.Fatalf("chaos: journal: %v", err)
	}
	ov := testcluster.Overlaps(acts)
	for _, o := range ov[:min(len(ov), 10)] {
		tb.Logf("chaos: %v", o)
	}
	sum.Overlaps, sum.Activations = len(ov), len(acts)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		sum.Load1 = strings.TrimSpace(string(b))
	}
	return sum
}

// recover3 waits until every silo runs and the three agree on the members.
func recover3(tb testcluster.TB, c *testcluster.Cluster) {
	for i := range c.Len() {
		if !c.Running(i) {
			c.Restart(i)
		}
	}
	c.WaitMembers(c.Len())
}

// tickersLost returns the Tickers whose count does not rise within 20 s:
// their reminder no longer fires. A count that falls (a new activation
// starts at 0) is read again.
func tickersLost(tb testcluster.TB, c *testcluster.Cluster, tickers []string) []string {
	cl := c.Client(tb, gateways(c, 0)...)
	count := func(ctx context.Context, a string) (int64, bool) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := cl.Ask(cctx, a, &client.Message{Message: "count"})
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(r.Message, 10, 64)
		return n, err == nil
	}
	first := map[string]int64{}
	for _, a := range tickers {
		first[a], _ = count(tb.Context(), a)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), 20*time.Second)
	defer cancel()
	pending := slices.Clone(tickers)
	for len(pending) > 0 && ctx.Err() == nil {
		pause(ctx, 500*time.Millisecond)
		var still []string
		for _, a := range pending {
			n, ok := count(ctx, a)
			switch {
			case ok && n > first[a]:
			case ok && n < first[a]:
				first[a] = n
				still = append(still, a)
			default:
				still = append(still, a)
			}
		}
		pending = still
	}
	return pending
}

// messagesLost waits up to 2 minutes for every published id to be
// acknowledged (a TopicSink line) or dead-lettered, and returns those that
// are neither, and the number of dead letters.
func messagesLost(tb testcluster.TB, c *testcluster.Cluster, cl *client.Client, sub string, published []string) ([]string, int) {
	ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Minute)
	defer cancel()
	want := testcluster.Principal + ":" + sub
	var missing []string
	dead := map[string]bool{}
	for {
		acked := map[string]bool{}
		if lines, err := c.ReadTopicSink(); err == nil {
			for _, l := range lines {
				if l.Subscription == want && l.Outcome == "ack" {
					acked[l.ID] = true
				}
			}
		}
		for after := ""; ; {
			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			page, err := cl.Topics().DeadLetters(dctx, sub, client.After(after), client.Limit(1000))
			dcancel()
			if err != nil {
				break
			}
			for _, d := range page.Items {
				dead[d.Message.ID] = true
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		missing = missing[:0]
		for _, id := range published {
			if !acked[id] && !dead[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 || ctx.Err() != nil {
			return missing, len(dead)
		}
		pause(ctx, 500*time.Millisecond)
	}
}

// retryCall calls f until it succeeds, for up to a minute.
func retryCall(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(cctx)
		ccancel()
		if err == nil || errs.Code(err) == codes.InvalidArgument || ctx.Err() != nil {
			return err
		}
		pause(ctx, 200*time.Millisecond)
	}
}

// rssKB is the resident set of process pid in KiB (0 if unknown).
func rssKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// jitter returns a random duration in [lo, hi).
func jitter(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// outOfOrder counts the messages the subscription sub got for the first
// time (to any of its members: a subscription hands its messages to its
// members in turn) after a message published later: the one publisher's
// messages reach a subscription one at a time, in publish order. A
// message got again, after a crash, a reload or a retry, may come after
// later ones, and to another member than the first time; only the
// subscription's first delivery of each counts.
func outOfOrder(tb testcluster.TB, c *testcluster.Cluster, sub string, published []string) int {
	lines, err := c.ReadTopicSink()
	if err != nil {
		tb.Logf("chaos: order: %v", err)
		return 0
	}
	index := make(map[string]int, len(published))
	for i, id := range published {
		index[id] = i
	}
	want := testcluster.Principal + ":" + sub
	seen := map[string]bool{}
	last, n := -1, 0
	for _, l := range lines {
		i, ok := index[l.ID]
		if l.Subscription != want || !ok || seen[l.ID] {
			continue
		}
		seen[l.ID] = true
		if i < last {
			n++
			if n <= 10 {
				tb.Logf("chaos: order: %s got message %d (%s) first after message %d", l.Agent, i, l.ID, last)
			}
			continue
		}
		last = i
	}
	return n
}
