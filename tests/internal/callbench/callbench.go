// Package callbench is the measuring loop the A2A and MCP benchmark
// programs share: n callers in a window of time, each call's latency, the
// rates of the windows, the process's CPU and allocations per call, and
// one JSON line per series with its rate as a ratio of an anchor's.
package callbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Call makes one call as caller i and returns its latency.
type Call func(ctx context.Context, i int) (time.Duration, error)

// Series is what the windows of one bench at one caller count measured.
type Series struct {
	Bench string
	N     int

	rates  []float64
	lat    []time.Duration
	calls  int64
	errors int64
	first  string        // the first error
	cpu    time.Duration // the process's CPU time (user and system) in the windows
	wall   time.Duration // the windows' wall time
	alloc  uint64        // bytes allocated by the process in the windows
}

// RateMedian is the median of the windows' rates (calls a second).
func (sr *Series) RateMedian() float64 { return Median(sr.rates) }

// Window runs n callers for d, recording into sr (nil: a warm-up). A call
// that fails counts as an error; the first one's text is kept.
func Window(ctx context.Context, n int, d time.Duration, sr *Series, call Call) {
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
	start, cpu0, alloc0 := time.Now(), cpuTime(), allocated()
	wg.Wait()
	if sr != nil {
		sr.cpu += cpuTime() - cpu0
		sr.alloc += allocated() - alloc0
		sr.wall += time.Since(start)
		sr.rates = append(sr.rates, float64(calls.Load())/time.Since(start).Seconds())
		sr.calls += calls.Load()
		sr.errors += errs.Load()
	}
}

// Median is the median of v (0 if empty).
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Emit writes sr as a JSON line; with an anchor rate above 0, its median
// rate also as a ratio of it, naming the anchor.
func Emit(out io.Writer, sr *Series, anchorName string, anchor float64) {
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
		"bench": sr.Bench, "n": sr.N, "rates": sr.rates, "rate_median": Median(sr.rates),
		"p50_us": q(0.50), "p99_us": q(0.99), "max_us": q(1), "mean_us": mean,
		"calls": sr.calls, "errors": sr.errors,
	}
	if sr.first != "" {
		rec["first_error"] = sr.first
	}
	if sr.calls > 0 && sr.wall > 0 {
		// On a loaded machine the wall times say little; what a call
		// costs the process's CPU says more, and how busy it was says
		// whether the callers waited for CPU or for something else.
		rec["cpu_us_per_call"] = float64(sr.cpu.Microseconds()) / float64(sr.calls)
		rec["cpu_busy"] = sr.cpu.Seconds() / sr.wall.Seconds()
		rec["alloc_kb_per_call"] = float64(sr.alloc) / 1024 / float64(sr.calls)
	}
	if anchor > 0 {
		rec["anchor"] = anchorName
		rec["ratio_median"] = Median(sr.rates) / anchor
	}
	b, _ := json.Marshal(rec)
	fmt.Fprintln(out, string(b))
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// allocated is the bytes the process allocated so far.
func allocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}
