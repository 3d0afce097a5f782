package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// The scale suite: a local Ask's latency against one agent among few idle
// activations, then among many (default 1,000 and 1,000,000), and the heap
// each idle activation holds at the large count. Rows: scale-small (the
// anchor), scale-large (ratio_median: its rate over the anchor's; the goal is
// p50 and p99 within 1.2x), and a memory row for the large count. Run it in a
// fresh process. The heap the large count adds is checked against a bound
// (-heap-bound bytes per activation, 400 by default: 400 MB for 1,000,000
// idle activations); past it the suite fails, after printing its rows.

func runScale(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	small := fs.Int("small", 1000, "idle activations for the anchor")
	large := fs.Int("large", 1_000_000, "idle activations for the subject")
	rounds := fs.Int("rounds", 5, "measured windows at each count")
	warm := fs.Duration("warmup", 250*time.Millisecond, "unmeasured warm-up before each window")
	win := fs.Duration("window", time.Second, "measured window")
	par := fs.Int("par", 64, "concurrent activating callers")
	bound := fs.Float64("heap-bound", 400, "fail if the heap grows by more than this many bytes per idle activation (0: no check)")
	run := fs.String("run", "", "run stamp to put in every JSON line")
	var prof profFlags
	prof.register(fs) // profiles cover the windows at the large count
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *small < 1 || *large <= *small || *rounds < 1 {
		return errors.New("want 1 <= -small < -large and -rounds >= 1")
	}
	rt, err := newRuntime()
	if err != nil {
		return err
	}
	defer closeRuntime(rt)
	hot := addresses(typeBench, "hot", 1)
	if _, err := activateAll(rt, hot, 1); err != nil {
		return err
	}
	measure := func(name, anchor string) *series {
		s := &series{bench: name, n: 1, anchor: anchor}
		for range *rounds {
			s.add(runWindow(1, *warm, *win, localCaller(rt, hot, 1)))
		}
		return s
	}
	idle := addresses(typeMem, "idle", *large)
	if _, err := activateAll(rt, idle[:*small], *par); err != nil {
		return err
	}
	anchor := measure("scale-small", "")
	before := heapAlloc()
	d, err := activateAll(rt, idle[*small:], *par)
	if err != nil {
		return err
	}
	after := heapAlloc()
	stopProf, err := prof.start()
	if err != nil {
		return err
	}
	subject := measure("scale-large", "scale-small")
	stopProf()
	for i := range subject.rates {
		subject.ratios = append(subject.ratios, subject.rates[i]/anchor.rates[min(i, len(anchor.rates)-1)])
	}
	logf("scale: %d more agents in %v, heap %d -> %d bytes", *large-*small, d.Round(time.Millisecond), before, after)
	emit(out, anchor.row(*run))
	emit(out, subject.row(*run))
	perGrain := (float64(after) - float64(before)) / float64(*large-*small)
	emit(out, memRow{
		Bench:           "memory",
		BytesPerGrain:   round(perGrain, 1),
		Grains:          *large,
		ActivationsPerS: round(float64(*large-*small)/d.Seconds(), 0),
		HeapBefore:      before,
		HeapAfter:       after,
		Run:             *run,
	})
	if *bound > 0 && perGrain > *bound {
		return fmt.Errorf("heap per idle activation %.1f B exceeds the bound of %.0f B (%d activations: %.0f MB)", perGrain, *bound, *large, *bound*float64(*large)/1e6)
	}
	return nil
}
