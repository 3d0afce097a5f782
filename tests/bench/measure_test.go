package main

import (
	"errors"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestBucketsCoverAndOrder(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 255, 256, 258, 511, 512, 1000, 1 << 20, 123456789, 1 << 40, math.MaxUint64} {
		i := bucketOf(v)
		if i <= prev || i >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d after %d (of %d)", v, i, prev, numBuckets)
		}
		prev = i
		if lo := bucketLow(i); lo > v {
			t.Fatalf("bucketLow(%d) = %d > %d", i, lo, v)
		}
		if i+1 < numBuckets && bucketLow(i+1) <= v {
			t.Fatalf("%d is also in bucket %d", v, i+1)
		}
	}
	// Buckets are contiguous: each one starts where the last ended.
	for i := 1; i < numBuckets; i++ {
		if bucketOf(bucketLow(i)) != i || bucketOf(bucketLow(i)-1) != i-1 {
			t.Fatalf("bucket %d (low %d) is not contiguous", i, bucketLow(i))
		}
	}
}

func TestBucketError(t *testing.T) {
	for v := uint64(1); v < 1<<40; v = v*3/2 + 1 {
		mid := bucketMid(bucketOf(v))
		if v < 256 && mid != float64(v) {
			t.Fatalf("%d ns reads as %v, want exact", v, mid)
		}
		if rel := math.Abs(mid-float64(v)) / float64(v); rel > 1.0/128 {
			t.Fatalf("%d ns reads as %v: error %.4f", v, mid, rel)
		}
	}
}

func TestQuantilesAndMerge(t *testing.T) {
	var a, b histogram
	if a.quantile(0.5) != 0 || a.mean() != 0 {
		t.Fatal("empty histogram is not zero")
	}
	for i := 1; i <= 100; i++ {
		a.record(time.Duration(i)) // 1..100 ns, exact buckets
	}
	for i := 0; i < 100; i++ {
		b.record(time.Millisecond)
	}
	b.record(-time.Second) // clamps to 0
	a.merge(&b)
	if a.n != 201 {
		t.Fatalf("n = %d", a.n)
	}
	if got := a.quantile(0.25); got != 50 { // rank 51 of 201: 0, 1, ..., 50
		t.Fatalf("p25 = %v, want 50", got)
	}
	if got := a.quantile(0.99); math.Abs(got-1e6)/1e6 > 1.0/128 {
		t.Fatalf("p99 = %v, want about 1e6", got)
	}
	if a.max != uint64(time.Millisecond) {
		t.Fatalf("max = %d", a.max)
	}
	if want := (5050 + 100*1e6) / 201.0; a.mean() != want {
		t.Fatalf("mean = %v, want %v", a.mean(), want)
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{5, 1, 3}
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{2}, 2}, {xs, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if xs[0] != 5 {
		t.Error("median changed its input")
	}
}

func TestRunWindowCountsAndStops(t *testing.T) {
	g0 := runtime.NumGoroutine()
	mbs, stop := startChanGrains(10)
	w := runWindow(4, 5*time.Millisecond, 20*time.Millisecond, chanCaller(mbs, 4))
	stop()
	if w.calls == 0 || w.errs != 0 || w.h.n != uint64(w.calls) {
		t.Fatalf("calls %d, errs %d, recorded %d", w.calls, w.errs, w.h.n)
	}
	// A failing call never counts as a call. (It returns at once, so the
	// window sees many of them however loaded the machine is.)
	bad := runWindow(1, 0, 20*time.Millisecond, func(int) callFunc {
		return func() error { return errors.New("no") }
	})
	if bad.calls != 0 || bad.errs == 0 {
		t.Fatalf("failing calls: calls %d, errs %d", bad.calls, bad.errs)
	}
	waitGoroutines(t, g0)
}

func TestLocalAskAndClose(t *testing.T) {
	g0 := runtime.NumGoroutine()
	rt, err := newRuntime()
	if err != nil {
		t.Fatal(err)
	}
	addrs := addresses(typeMem, "t", 5)
	if _, err := activateAll(rt, addrs, 2); err != nil {
		t.Fatal(err)
	}
	if err := ask(rt, addresses(typeBench, "t", 1)[0], 41); err != nil {
		t.Fatal(err)
	}
	if rt.Len() != 6 {
		t.Fatalf("%d activations, want 6", rt.Len())
	}
	closeRuntime(rt)
	waitGoroutines(t, g0)
}

func TestCursorAndCounts(t *testing.T) {
	next := cursor(3, 4, 10) // starts at 3*(10/4) = 6
	var got []int
	for range 5 {
		got = append(got, next())
	}
	if want := []int{6, 7, 8, 9, 0}; !equal(got, want) {
		t.Fatalf("cursor walked %v, want %v", got, want)
	}
	if ns, err := parseCounts("1,64"); err != nil || !equal(ns, []int{1, 64}) {
		t.Fatalf("parseCounts: %v %v", ns, err)
	}
	if _, err := parseCounts("1,,2"); err == nil {
		t.Fatal("parseCounts accepted an empty count")
	}
	if num(1234567.4) != "1,234,567" || num(-1234) != "-1,234" || us(0.5) != "0.50" || us(1234.5) != "1,235" {
		t.Fatalf("formatting: %s %s %s %s", num(1234567.4), num(-1234), us(0.5), us(1234.5))
	}
}

func TestReadRecs(t *testing.T) {
	in := "noise\n{\"bench\":\"local\",\"n\":64,\"rate_median\":10,\"ratio_median\":0.5}\n{\"bench\":\"memory\",\"bytes_per_grain\":900}\n"
	rs, err := readRecs(strings.NewReader(in))
	if err != nil || len(rs) != 2 {
		t.Fatalf("%v %v", rs, err)
	}
	if s := pick(rs, "local", 64); !s.ok || s.vsChan != 0.5 || s.rate != 10 {
		t.Fatalf("pick local: %+v", s)
	}
	if s := pick(rs, "memory", 0); s.bytes != 900 {
		t.Fatalf("pick memory: %+v", s)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// waitGoroutines fails the test if goroutines started by it are still
// running after a grace period.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A window accounts the CPU time its calls cost, and a process's CPU time
// reads the same from /proc as from getrusage (to its 10 ms ticks).
func TestWindowCPU(t *testing.T) {
	spin := func(int) callFunc {
		return func() error {
			x := 0
			for i := range 100_000 {
				x += i
			}
			if x < 0 {
				return errors.New("unreachable")
			}
			return nil
		}
	}
	w := runWindow(2, 0, 50*time.Millisecond, spin)
	if len(w.cpu) != 1 || w.cpu[0] <= 0 {
		t.Fatalf("window CPU per call %v, want one positive figure", w.cpu)
	}
	s := &series{bench: "spin", n: 2}
	s.add(w)
	if r := s.row(""); r.CPU["self"] <= 0 {
		t.Fatalf("row CPU %v, want self > 0", r.CPU)
	}
	self, ok := cpuProc{}.cpuTime()
	if !ok {
		t.Fatal("getrusage failed")
	}
	proc, ok := cpuProc{pid: os.Getpid()}.cpuTime()
	if !ok {
		t.Skip("no /proc/PID/stat here") // not Linux
	}
	if proc > self+100*time.Millisecond || proc < self-time.Second {
		t.Fatalf("/proc says %v of CPU, getrusage %v", proc, self)
	}
}
