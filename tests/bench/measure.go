package main

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// histogram is a log-linear latency histogram in nanoseconds. Values below
// 2*subBuckets (256 ns) have a bucket each; above, every power of two is cut
// into subBuckets equal buckets, so a bucket is at most 1/128 of its value
// wide (under 0.8%). One caller owns one histogram: recording is two adds and
// an increment, with no allocation and nothing shared between callers.
type histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    uint64 // exact, so the mean is exact
	max    uint64
}

const (
	subBits    = 7
	subBuckets = 1 << subBits
	numBuckets = (64 - subBits + 1) * subBuckets
)

// bucketOf returns the bucket index of v nanoseconds.
func bucketOf(v uint64) int {
	if v < 2*subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // shift that leaves subBits+1 significant bits
	return (e+1)*subBuckets + int(v>>e) - subBuckets
}

// bucketLow returns the smallest value in bucket i.
func bucketLow(i int) uint64 {
	if i < 2*subBuckets {
		return uint64(i)
	}
	e := i/subBuckets - 1
	return uint64(i%subBuckets+subBuckets) << e
}

// bucketMid returns the middle of bucket i, the value a quantile reports.
func bucketMid(i int) float64 {
	if i < 2*subBuckets {
		return float64(i)
	}
	e := i/subBuckets - 1
	return float64(bucketLow(i)) + float64(uint64(1)<<e)/2
}

func (h *histogram) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += v
	if v > h.max {
		h.max = v
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile (0 < q <= 1) in nanoseconds, 0 if empty:
// the middle of the bucket holding the ceil(q*n)-th smallest value.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return bucketMid(i)
		}
	}
	return bucketMid(numBuckets - 1)
}

func (h *histogram) mean() float64 {
	if h.n == 0 {
		return 0
	}
	return float64(h.sum) / float64(h.n)
}

// callFunc makes one call and waits for its answer.
type callFunc func() error

// window is what one measured window produced.
type window struct {
	calls, errs int64
	rate        float64 // calls per second of the window
	h           *histogram
	// cpu is the CPU time per call of each of cpuProcs over the whole
	// window, warm-up and the last calls included, divided by every call
	// made in it; nil if it could not be read.
	cpu []time.Duration
}

// runWindow runs n closed-loop callers (each calls, waits for the answer and
// calls again at once) on fresh goroutines. Calls that complete in the first
// warm are not counted; calls that complete in the next win are, and their
// latencies are recorded; each caller stops after its first call that
// completes after the window. newCaller(w) builds caller w's call function.
func runWindow(n int, warm, win time.Duration, newCaller func(w int) callFunc) window {
	return runWindowYield(n, warm, win, false, newCaller)
}

// runWindowYield is runWindow whose callers, if yield, call runtime.Gosched
// between calls (outside the timed interval): an experiment on the N=64 tail.
func runWindowYield(n int, warm, win time.Duration, yield bool, newCaller func(w int) callFunc) window {
	type state struct {
		h           histogram
		calls, errs int64
		all         int64 // every call made, warm-up included
	}
	fns := make([]callFunc, n)
	states := make([]*state, n) // separately allocated: no false sharing
	for w := range fns {
		fns[w] = newCaller(w)
		states[w] = new(state)
	}
	var wg sync.WaitGroup
	cpu0 := cpuSample()
	t0 := time.Now()
	from, to := warm, warm+win
	for w := range n {
		wg.Add(1)
		go func(call callFunc, s *state) {
			defer wg.Done()
			for {
				start := time.Since(t0)
				err := call()
				end := time.Since(t0)
				s.all++
				if yield {
					runtime.Gosched()
				}
				switch {
				case end < from:
					continue
				case end > to:
					return
				case err != nil:
					s.errs++
				default:
					s.calls++
					s.h.record(end - start)
				}
			}
		}(fns[w], states[w])
	}
	wg.Wait()
	cpu1 := cpuSample()
	res := window{h: new(histogram)}
	var all int64
	for _, s := range states {
		res.h.merge(&s.h)
		res.calls += s.calls
		res.errs += s.errs
		all += s.all
	}
	if cpu0 != nil && cpu1 != nil && all > 0 {
		for i := range cpu1 {
			res.cpu = append(res.cpu, (cpu1[i]-cpu0[i])/time.Duration(all))
		}
	}
	res.rate = float64(res.calls) / win.Seconds()
	return res
}

// series gathers the windows of one (bench, n).
type series struct {
	bench, anchor string
	n             int
	rates, ratios []float64
	h             histogram
	calls, errs   int64
	cpu           [][]float64          // per cpuProcs entry: µs of CPU per call, per window
	others        []string             // further anchors measured in the same rounds (interleaveAll)
	vs            map[string][]float64 // per round: rate / the rate of each of others
}

func (s *series) add(w window) {
	if w.cpu != nil {
		if s.cpu == nil {
			s.cpu = make([][]float64, len(w.cpu))
		}
		for i, d := range w.cpu {
			s.cpu[i] = append(s.cpu[i], float64(d)/1e3)
		}
	}
	s.rates = append(s.rates, w.rate)
	s.h.merge(w.h)
	s.calls += w.calls
	s.errs += w.errs
}

// row is one JSON line; its fields match the peer's pabench so rows line up.
// Latencies are in microseconds.
type row struct {
	Bench       string    `json:"bench"`
	N           int       `json:"n"`
	Rates       []float64 `json:"rates"`
	RateMedian  float64   `json:"rate_median"`
	P50         float64   `json:"p50_us"`
	P99         float64   `json:"p99_us"`
	P999        float64   `json:"p999_us"`
	P9999       float64   `json:"p9999_us"`
	Max         float64   `json:"max_us"`
	Mean        float64   `json:"mean_us"`
	Calls       int64     `json:"calls"`
	Errors      int64     `json:"errors"`
	Anchor      string    `json:"anchor,omitempty"`
	Ratios      []float64 `json:"ratios,omitempty"`
	RatioMedian *float64  `json:"ratio_median,omitempty"`
	// CPU is the CPU time per call of each process the window accounts
	// (this one, "self", and for the remote suite "node-b"), in µs: the
	// median across windows of each window's CPU time over its calls.
	CPU map[string]float64 `json:"cpu_us_per_call,omitempty"`
	// VsMedians is, for each further anchor measured in the same rounds,
	// the median of the per-round rate ratios to it.
	VsMedians map[string]float64 `json:"vs_ratio_medians,omitempty"`
	Run       string             `json:"run,omitempty"`
}

func (s *series) row(run string) row {
	r := row{
		Bench:      s.bench,
		N:          s.n,
		Rates:      roundAll(s.rates, 0),
		RateMedian: round(median(s.rates), 0),
		P50:        round(s.h.quantile(0.50)/1e3, 2),
		P99:        round(s.h.quantile(0.99)/1e3, 2),
		P999:       round(s.h.quantile(0.999)/1e3, 2),
		P9999:      round(s.h.quantile(0.9999)/1e3, 2),
		Max:        round(float64(s.h.max)/1e3, 2),
		Mean:       round(s.h.mean()/1e3, 2),
		Calls:      s.calls,
		Errors:     s.errs,
		Anchor:     s.anchor,
		Run:        run,
	}
	for i, xs := range s.cpu {
		if r.CPU == nil {
			r.CPU = make(map[string]float64)
		}
		r.CPU[cpuProcs[i].name] = round(median(xs), 2)
	}
	for o, xs := range s.vs {
		if r.VsMedians == nil {
			r.VsMedians = make(map[string]float64)
		}
		r.VsMedians[o] = round(median(xs), 4)
	}
	if len(s.ratios) > 0 {
		r.Ratios = roundAll(s.ratios, 4)
		m := round(median(s.ratios), 4)
		r.RatioMedian = &m
	}
	return r
}

// interleave runs rounds of (anchor window, subject window), so that both see
// the same machine state, and records each round's subject/anchor rate ratio.
func interleave(rounds int, warm, win time.Duration, yield bool, n int, anchor, subject *series, anchorCaller, subjectCaller func(w int) callFunc) {
	for r := range rounds {
		a := runWindowYield(n, warm, win, yield, anchorCaller)
		anchor.add(a)
		s := runWindowYield(n, warm, win, yield, subjectCaller)
		subject.add(s)
		ratio := 0.0
		if a.rate > 0 {
			ratio = s.rate / a.rate
		}
		subject.ratios = append(subject.ratios, ratio)
		logf("n=%d round %d/%d: %s %.0f/s, %s %.0f/s (%.1f%%)", n, r+1, rounds, anchor.bench, a.rate, subject.bench, s.rate, 100*ratio)
	}
}

// interleaveAll runs rounds of one window of each of ss, in order, so that
// all see the same machine state. A series with an anchor among ss records
// each round's rate ratio to it; a series with others records its ratio to
// each of them too (vs).
func interleaveAll(rounds int, warm, win time.Duration, yield bool, n int, ss []*series, callers []func(w int) callFunc) {
	for r := range rounds {
		rates := map[string]float64{}
		for i, s := range ss {
			w := runWindowYield(n, warm, win, yield, callers[i])
			s.add(w)
			rates[s.bench] = w.rate
		}
		line := fmt.Sprintf("n=%d round %d/%d:", n, r+1, rounds)
		for _, s := range ss {
			line += fmt.Sprintf(" %s %.0f/s", s.bench, rates[s.bench])
			if a := rates[s.anchor]; s.anchor != "" && a > 0 {
				s.ratios = append(s.ratios, rates[s.bench]/a)
				line += fmt.Sprintf(" (%.1f%% of %s)", 100*rates[s.bench]/a, s.anchor)
			}
			for _, o := range s.others {
				if a := rates[o]; a > 0 {
					if s.vs == nil {
						s.vs = map[string][]float64{}
					}
					s.vs[o] = append(s.vs[o], rates[s.bench]/a)
				}
			}
			line += ","
		}
		logf("%s", strings.TrimSuffix(line, ","))
	}
}

// median returns the median of xs (the mean of the middle two for an even
// count), 0 for none. xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func roundAll(xs []float64, digits int) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = round(x, digits)
	}
	return out
}
