package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/reminders"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// harness is N silos, as processes or in this process.
type harness interface {
	n() int
	name(i int) string
	// metrics is silo i's Prometheus exposition.
	metrics(ctx context.Context, i int) (string, error)
	// perSilo is silo i's heap (bytes) and goroutines; in this process,
	// the process's divided by the silos.
	perSilo(ctx context.Context, i int) (heap, goroutines float64, err error)
	stop(ctx context.Context, i int) error
	start(ctx context.Context, i int) error
	ask(ctx context.Context, addr string) error
}

// metric sums the samples of name whose labels contain label ("" : all)
// in a Prometheus text exposition.
func metric(text, name, label string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') || (label != "" && !strings.Contains(rest, label)) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// histogram is a merged Prometheus histogram: upper bound -> cumulative
// count.
type histogram struct {
	le    map[float64]float64
	sum   float64
	count float64
}

func (h *histogram) add(text, name string) {
	if h.le == nil {
		h.le = make(map[float64]float64)
	}
	for _, line := range strings.Split(text, "\n") {
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, name+"_bucket{"):
			i := strings.Index(line, `le="`)
			if i < 0 {
				continue
			}
			end := strings.IndexByte(line[i+4:], '"')
			le, err := strconv.ParseFloat(line[i+4:i+4+end], 64)
			if err == nil {
				h.le[le] += v
			}
		case strings.HasPrefix(line, name+"_sum"):
			h.sum += v
		case strings.HasPrefix(line, name+"_count"):
			h.count += v
		}
	}
}

// quantile is the upper bound of the bucket holding quantile q.
func (h *histogram) quantile(q float64) float64 {
	bounds := make([]float64, 0, len(h.le))
	for b := range h.le {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	for _, b := range bounds {
		if h.le[b] >= q*h.count {
			return b
		}
	}
	return math.Inf(1)
}

// sumOver sums a metric over the silos in live.
func sumOver(ctx context.Context, h harness, live []int, name, label string) (float64, error) {
	var total float64
	for _, i := range live {
		text, err := h.metrics(ctx, i)
		if err != nil {
			return 0, err
		}
		v, _ := metric(text, name, label)
		total += v
	}
	return total, nil
}

// waitUntil polls cond every 20 ms until it holds or limit passes; it
// returns how long it took (the measurement) and whether it held.
func waitUntil(ctx context.Context, limit time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start), true
		}
		if time.Since(start) > limit || ctx.Err() != nil {
			return time.Since(start), false
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// echoAddr is the i-th agent, owned by the harness's principal (so its
// gateway lets it ask with no rule).
func echoAddr(i int) string { return fmt.Sprintf("Echo:%s:e%d", testcluster.Principal, i) }

// runCluster is the procs and inproc modes.
func runCluster(ctx context.Context, o opts) error {
	period, err := time.ParseDuration(o.period)
	if err != nil {
		return fmt.Errorf("-period: %w", err)
	}
	idle, err := time.ParseDuration(o.idle)
	if err != nil {
		return fmt.Errorf("-idle: %w", err)
	}
	dir, err := os.MkdirTemp("", "scale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	etcd, err := startEtcd(ctx, filepath.Join(dir, "etcd"))
	if err != nil {
		return err
	}
	defer etcd.Close()
	const prefix = "/scale/"

	// Reminders: o.fire of them tick every period (Ticker agents, their
	// first ticks spread over the period after a start margin); the rest
	// are due in a day (held, not fired).
	fire := min(o.fire, o.reminders)
	margin := 30*time.Second + time.Duration(o.silos)*time.Second
	if o.first > 0 {
		margin = o.first
	}
	first := time.Now().Add(margin)
	addr := func(i int) grain.Address {
		if i < fire {
			return grain.Address{Type: "Ticker", Owner: "bench", Alias: fmt.Sprintf("t%d", i)}
		}
		return seedAddr(i)
	}
	due := func(i int) time.Time {
		if i < fire {
			return first.Add(time.Duration(i) * period / time.Duration(max(fire, 1)))
		}
		return first.Add(24 * time.Hour)
	}
	t0 := time.Now()
	perBucket, err := seed(ctx, etcd.client, prefix, o.reminders, 1000, 4, addr, due, period)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	emit(row{Bench: "scale-seed", N: o.reminders, Median: time.Since(t0).Seconds(), Unit: "s",
		Note: fmt.Sprintf("%d firing every %v", fire, period)})

	t0 = time.Now()
	var h harness
	var closeH func()
	if o.mode == "procs" {
		defer testcluster.Cleanup() // the binaries, after the silos (closeH)
		h, closeH, err = startProcs(ctx, o.silos, o.window, etcd.endpoint, prefix, o.leaseTTL)
	} else {
		h, closeH, err = startInproc(ctx, o.silos, etcd.endpoint, prefix, o.leaseTTL)
	}
	if err != nil {
		return err
	}
	defer closeH()
	all := seq(h.n())
	members := func(live []int) func() bool {
		return func() bool {
			for _, i := range live {
				text, err := h.metrics(ctx, i)
				if err != nil {
					return false
				}
				if v, _ := metric(text, "agentsilo_view_members", ""); int(v) != len(live) {
					return false
				}
			}
			return true
		}
	}
	if d, ok := waitUntil(ctx, 5*time.Minute, members(all)); !ok {
		return fmt.Errorf("the %d silos did not agree on the members in %v", h.n(), d)
	}
	emit(row{Bench: "scale-start", N: h.n(), Median: time.Since(t0).Seconds(), Unit: "s", Note: o.mode + ": to every silo ready and agreeing on the members"})

	// Agents.
	t0 = time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	activate := func() {
		next.Store(0)
		failed.Store(0)
		for range o.conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < o.agents; i = int(next.Add(1)) - 1 {
					actx, cancel := context.WithTimeout(ctx, 30*time.Second)
					if err := h.ask(actx, echoAddr(i)); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
					cancel()
				}
			}()
		}
		wg.Wait()
	}
	activate()
	quietFrom := time.Now()
	emit(row{Bench: "scale-agents", N: o.agents, Median: float64(o.agents) / time.Since(t0).Seconds(), Unit: "asks/s",
		Note: fmt.Sprintf("activating; %d failed %v", failed.Load(), firstErr.Load())})

	// Per silo, settled.
	heaps, gors, err := perSiloAll(ctx, h, all)
	if err != nil {
		return err
	}
	emit(row{Bench: "scale-silo-heap", N: h.n(), Median: median(heaps), Unit: "MiB", Note: fmt.Sprintf("%s; max %.1f; %d agents, %d reminders over the silos", o.mode, slices.Max(heaps), o.agents, o.reminders)})
	if o.memprofile != "" && o.mode == "inproc" {
		if err := writeHeapProfile(o.memprofile); err != nil {
			return err
		}
	}
	emit(row{Bench: "scale-silo-goroutines", N: h.n(), Median: median(gors), Unit: "goroutines", Note: fmt.Sprintf("%s; max %.0f", o.mode, slices.Max(gors))})

	// etcd and the silos' CPU at idle.
	r0, err := etcd.requestsByMethod()
	if err != nil {
		return err
	}
	c0 := cpuTimes(h)
	select {
	case <-time.After(idle):
	case <-ctx.Done():
		return ctx.Err()
	}
	c1 := cpuTimes(h)
	r1, err := etcd.requestsByMethod()
	if err != nil {
		return err
	}
	rate, byMethod := rates(r0, r1, idle)
	emit(row{Bench: "scale-etcd-idle", N: h.n(), Median: rate, Unit: "req/s",
		Note: fmt.Sprintf("gRPC messages etcd received over %v: %.2f/s per silo; 1,000 silos at that rate: %.0f/s; by method: %s", idle, rate/float64(h.n()), rate/float64(h.n())*1000, byMethod)})
	if c0 != nil && c1 != nil {
		var cpus []float64
		total := 0.0
		for i := range c0 {
			if c1[i] >= c0[i] {
				cpus = append(cpus, (c1[i]-c0[i])/idle.Seconds()*100)
				total += (c1[i] - c0[i]) / idle.Seconds()
			}
		}
		if len(cpus) > 0 {
			emit(row{Bench: "scale-silo-idle-cpu", N: len(cpus), Median: median(cpus), Unit: "% of a core",
				Note: fmt.Sprintf("each silo's user+system CPU over %v at idle (/proc/<pid>/stat); max %.2f; all silos %.2f cores", idle, slices.Max(cpus), total)})
		}
	}
	if o.quiet > 0 {
		// The peer transport closes a stream that carried nothing for its
		// idle timeout (checked as often): after it, the silos hold only
		// the peers that still talk (reminders firing on another silo's
		// agents).
		wait := time.Until(quietFrom.Add(o.quiet))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		if heaps, gors, err = perSiloAll(ctx, h, all); err != nil {
			return err
		}
		emit(row{Bench: "scale-silo-goroutines-quiet", N: h.n(), Median: median(gors), Unit: "goroutines",
			Note: fmt.Sprintf("%s; %v after the agents were activated; max %.0f; heap %.1f MiB median, %.1f max", o.mode, time.Since(quietFrom).Round(time.Second), slices.Max(gors), median(heaps), slices.Max(heaps))})
	}

	names := make([]string, h.n())
	for i := range names {
		names[i] = h.name(i)
	}
	movedReminders := func(from, to []string) int {
		n := 0
		for b, c := range perBucket {
			if cluster.Owner(reminders.BucketName(b), from) != cluster.Owner(reminders.BucketName(b), to) {
				n += c
			}
		}
		return n
	}
	movedAgents := func(from, to []string) int {
		n := 0
		for i := range o.agents {
			if cluster.Owner(echoAddr(i), from) != cluster.Owner(echoAddr(i), to) {
				n++
			}
		}
		return n
	}
	echo := `type="Echo"`

	// A graceful leave of the last silo.
	last := h.n() - 1
	rest := all[:last]
	onLast, err := sumOver(ctx, h, []int{last}, "agentsilo_activations", echo)
	if err != nil {
		return err
	}
	// Where the silos read the reminder buckets they took over: handed
	// over by the silo that held them, or from etcd.
	loadedFrom := func(idx []int) (peer, etcd float64) {
		peer, _ = sumOver(ctx, h, idx, "agentsilo_reminder_buckets_loaded_total", `from="peer"`)
		etcd, _ = sumOver(ctx, h, idx, "agentsilo_reminder_buckets_loaded_total", `from="etcd"`)
		return peer, etcd
	}
	peer0, etcd0 := loadedFrom(rest)
	t0 = time.Now()
	if err := h.stop(ctx, last); err != nil {
		return err
	}
	stopped := time.Since(t0)
	seen, ok := converge(ctx, h, rest, t0)
	emit(row{Bench: "scale-view-leave", N: h.n(), Median: ms(slices.Max(seen)), Unit: "ms",
		Note: fmt.Sprintf("graceful stop (%v) then every silo's view without it (the last silo's; the median silo's %.0f ms); converged %t", stopped.Round(time.Millisecond), ms(medianDur(seen)), ok)})
	// Every bucket the view moved, loaded (each silo counts one when it has).
	movedBuckets := func(from, to []string) float64 {
		n := 0.0
		for b := range reminders.Buckets {
			if cluster.Owner(reminders.BucketName(b), from) != cluster.Owner(reminders.BucketName(b), to) {
				n++
			}
		}
		return n
	}
	var peer1, etcd1 float64
	moved := movedBuckets(names, names[:last]) // the same for the join back
	waitUntil(ctx, 30*time.Second, func() bool {
		peer1, etcd1 = loadedFrom(rest)
		return peer1-peer0+etcd1-etcd0 >= moved
	})
	emit(row{Bench: "scale-moved-leave", N: h.n(), Median: onLast, Unit: "agents",
		Note: fmt.Sprintf("activations the leaving silo held (placement: %d of %d, ideal 1/N %d); reminders moved by placement: %d of %d (ideal %d); its buckets taken over: %.0f handed over, %.0f read from etcd",
			movedAgents(names, names[:last]), o.agents, o.agents/h.n(), movedReminders(names, names[:last]), o.reminders, o.reminders/h.n(), peer1-peer0, etcd1-etcd0)})

	// Every agent active again, then the silo joins back.
	activate()
	before, err := sumOver(ctx, h, rest, "agentsilo_activations", echo)
	if err != nil {
		return err
	}
	want := movedAgents(names[:last], names)
	t0 = time.Now()
	if err := h.start(ctx, last); err != nil {
		return err
	}
	started := time.Since(t0)
	seen, ok = converge(ctx, h, all, t0)
	emit(row{Bench: "scale-view-join", N: h.n(), Median: ms(slices.Max(seen)), Unit: "ms",
		Note: fmt.Sprintf("start (%v, to ready) then every silo's view with it (the last silo's; the median silo's %.0f ms); converged %t", started.Round(time.Millisecond), ms(medianDur(seen)), ok)})
	var after float64
	_, swept := waitUntil(ctx, 30*time.Second, func() bool {
		after, _ = sumOver(ctx, h, rest, "agentsilo_activations", echo)
		return before-after >= float64(want)
	})
	var peer2, etcd2 float64
	waitUntil(ctx, 30*time.Second, func() bool {
		peer2, etcd2 = loadedFrom([]int{last})
		return peer2+etcd2 >= moved
	})
	emit(row{Bench: "scale-moved-join", N: h.n(), Median: before - after, Unit: "agents",
		Note: fmt.Sprintf("activations the others let go (placement: %d of %d, ideal 1/N %d; all swept %t); reminders moved by placement: %d of %d (ideal %d); the joiner's buckets: %.0f handed over, %.0f read from etcd",
			want, o.agents, o.agents/h.n(), swept, movedReminders(names[:last], names), o.reminders, o.reminders/h.n(), peer2, etcd2)})

	// Lateness: every firing reminder fired at least once.
	if fire > 0 {
		limit := time.Until(first.Add(period)) + 30*time.Second
		waitUntil(ctx, limit, func() bool {
			v, _ := sumOver(ctx, h, all, "agentsilo_reminders_fired_total", "")
			return v >= float64(fire)
		})
		var hist histogram
		for _, i := range all {
			text, err := h.metrics(ctx, i)
			if err != nil {
				return err
			}
			hist.add(text, "agentsilo_reminder_lateness_seconds")
		}
		mean := 0.0
		if hist.count > 0 {
			mean = hist.sum / hist.count * 1000
		}
		emit(row{Bench: "scale-reminder-lateness", N: int(hist.count), Median: mean, Unit: "ms (mean)",
			Note: fmt.Sprintf("p50 <= %.0f ms, p99 <= %.0f ms (bucket bounds); %d reminders firing every %v, the rest held", hist.quantile(0.5)*1000, hist.quantile(0.99)*1000, fire, period)})
	}
	return nil
}

// runRoute runs the cluster's BenchmarkRoute: the owner of an address at
// 4, 16 and 100 members, by the router's table per view and by hashing
// every member.
func runRoute(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^BenchmarkRoute$", "-benchtime", "2000000x", "-count", "3", "./cluster/")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go test -bench BenchmarkRoute ./cluster/: %w\n%s", err, out)
	}
	per := map[string][]float64{}
	var order []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkRoute/") || f[3] != "ns/op" {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkRoute/")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // -GOMAXPROCS
		}
		v, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			continue
		}
		if per[name] == nil {
			order = append(order, name)
		}
		per[name] = append(per[name], v)
	}
	if len(order) == 0 {
		return errors.New("BenchmarkRoute printed no results")
	}
	for _, name := range order {
		note := ""
		if base, ok := per[strings.Replace(name, "members=100", "members=4", 1)]; ok && strings.HasSuffix(name, "members=100") {
			note = fmt.Sprintf("x%.2f of members=4", median(per[name])/median(base))
			if strings.HasPrefix(name, "table/") {
				note += " (goal <= 1.2)"
			} else {
				note += " (hashing every member, for comparison)"
			}
		}
		emit(row{Bench: "scale-route-" + strings.ReplaceAll(name, "/members=", "-"), N: len(per[name]), Median: median(per[name]), Unit: "ns", Note: note})
	}
	return nil
}

// writeHeapProfile writes this process's heap profile (the in-process
// silos', with the etcd's) after a GC.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.Lookup("heap").WriteTo(f, 0)
}

// pider is a harness of processes.
type pider interface{ pid(i int) int }

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// Linux).
const clockTicks = 100

// cpuTimes is each silo's user+system CPU so far, in seconds (from
// /proc/<pid>/stat); nil for silos in this process or off Linux.
func cpuTimes(h harness) []float64 {
	p, ok := h.(pider)
	if !ok {
		return nil
	}
	out := make([]float64, h.n())
	for i := range out {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid(i)))
		if err != nil {
			return nil
		}
		// The fields after the command's closing parenthesis: state is
		// the first (field 3), utime and stime fields 14 and 15.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			return nil
		}
		u, err1 := strconv.ParseFloat(f[11], 64)
		s, err2 := strconv.ParseFloat(f[12], 64)
		if err1 != nil || err2 != nil {
			return nil
		}
		out[i] = (u + s) / clockTicks
	}
	return out
}

// rates is the total rate between two counts by method, and the methods
// by rate, highest first.
func rates(from, to map[string]float64, over time.Duration) (float64, string) {
	type mr struct {
		m string
		r float64
	}
	var all []mr
	total := 0.0
	for m, v := range to {
		r := (v - from[m]) / over.Seconds()
		total += r
		if r > 0 {
			all = append(all, mr{m, r})
		}
	}
	slices.SortFunc(all, func(a, b mr) int { return cmp.Compare(b.r, a.r) })
	var parts []string
	for _, x := range all {
		parts = append(parts, fmt.Sprintf("%s %.2f/s", x.m, x.r))
	}
	return total, strings.Join(parts, ", ")
}

// converge polls the silos in live (8 at a time) until each has shown a
// view of len(live) members, for at most a minute, and returns when each
// first showed it, since t0 (a minute for one that did not), and whether
// all did.
func converge(ctx context.Context, h harness, live []int, t0 time.Time) ([]time.Duration, bool) {
	seen := make([]time.Duration, len(live))
	left := len(live)
	for left > 0 && time.Since(t0) < time.Minute && ctx.Err() == nil {
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for k, i := range live {
			if seen[k] != 0 {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				text, err := h.metrics(ctx, i)
				if err != nil {
					return
				}
				if v, _ := metric(text, "agentsilo_view_members", ""); int(v) == len(live) {
					at := time.Since(t0)
					mu.Lock()
					seen[k] = at
					left--
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if left > 0 {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
	for k := range seen {
		if seen[k] == 0 {
			seen[k] = time.Minute
		}
	}
	return seen, left == 0
}

func ms(d time.Duration) float64 { return float64(d.Milliseconds()) }

func medianDur(ds []time.Duration) time.Duration {
	xs := slices.Clone(ds)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// perSiloAll reads the heap in use (MiB) and the goroutines of each silo
// of all.
func perSiloAll(ctx context.Context, h harness, all []int) (heaps, gors []float64, err error) {
	for _, i := range all {
		hp, g, err := h.perSilo(ctx, i)
		if err != nil {
			return nil, nil, err
		}
		heaps, gors = append(heaps, hp/(1<<20)), append(gors, g)
	}
	return heaps, gors, nil
}
