// Command scale measures how agentsilo scales with silos, agents and
// reminders. It starts its own embedded etcd (without fsync: the silos are
// measured, not the disk) and prints one JSON object per line. Modes:
//
//   - reminders (default): -silos reminder services in this process, placed
//     by bucket as a cluster places them, over -r reminders seeded in their
//     stored layout. It prints the heap each holds against one holding
//     every bucket, the keys read at a start and a restart, and a view
//     change's reminder work: the Rebalance call and the time until the
//     buckets moved are loaded on the silos that gained them.
//   - procs: -silos real silo processes (the binary the process tests
//     build) with -agents agents and -r reminders: per-silo heap and
//     goroutines, etcd requests/s at idle, the time for every silo to see
//     a join and a leave, agents and reminders moved by them, and reminder
//     lateness; with -start-concurrency the processes start in a moving
//     window, and with -quiet goroutines and heap are measured again once
//     idle peer streams are closed.
//   - inproc: the same with -silos silos in this process, on real gRPC
//     transports over loopback (for 100 silos, more than 2 cores run as
//     processes).
//   - route: the cost of finding an address's owner at 4, 16 and 100
//     members (the cluster's BenchmarkRoute).
//   - grpc: what gRPC alone costs per idle connection (-silos of them,
//     each with an open stream, the peer transport's settings): the floor
//     under an idle peer.
//
// Usage: go run ./tests/scale [-mode reminders|procs|inproc|route|grpc] [-silos 4] [-r 1000000] [-agents 20000]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"
)

type opts struct {
	mode       string
	silos      int
	reminders  int
	register   int
	fire       int
	agents     int
	conc       int
	period     string
	idle       string
	cpuprofile string
	memprofile string
	leaseTTL   time.Duration
	window     int
	first      time.Duration
	quiet      time.Duration
}

func main() {
	var o opts
	flag.StringVar(&o.mode, "mode", "reminders", "reminders, procs, inproc, route or grpc")
	flag.IntVar(&o.silos, "silos", 4, "silos")
	flag.IntVar(&o.reminders, "r", 100_000, "reminders, seeded in their stored layout")
	flag.IntVar(&o.register, "register", 5_000, "reminders mode: Register calls measured, on top of -r")
	flag.IntVar(&o.fire, "fire", 2_000, "procs and inproc modes: of the -r reminders, how many fire (every -period)")
	flag.IntVar(&o.agents, "agents", 20_000, "procs and inproc modes: agents activated")
	flag.IntVar(&o.conc, "c", 64, "concurrent callers")
	flag.StringVar(&o.period, "period", "1m", "procs and inproc modes: the seeded reminders' period (they fire, spread over it)")
	flag.StringVar(&o.idle, "idle", "10s", "procs and inproc modes: how long etcd's requests are counted at idle")
	flag.DurationVar(&o.leaseTTL, "lease-ttl", 0, "procs and inproc modes: the silos' --lease-ttl (0: their default, 2 s, which a 2-core machine running 100 silos cannot renew in time)")
	flag.DurationVar(&o.first, "first", 0, "procs and inproc modes: the firing reminders' first ticks are spread over the -period after this long from the seeding (0: 30 s plus 1 s per silo; a start in waves takes longer, and ticks due before a silo loads its reminders fire late)")
	flag.IntVar(&o.window, "start-concurrency", 0, "procs mode: start the silos this many at a time (silo i once silo i-k is ready); 0: all at once")
	flag.DurationVar(&o.quiet, "quiet", 0, "procs and inproc modes: also measure goroutines and heap per silo this long after the agents were activated (the peer transport closes streams idle for 1 min, checked every minute: 2m10s sees them closed); 0: not")
	flag.StringVar(&o.memprofile, "memprofile", "", "inproc mode: a heap profile of the process once the agents are active, to this file")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "reminders mode: CPU profile of the view changes, to this file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch o.mode {
	case "reminders":
		err = runReminders(ctx, o)
	case "procs", "inproc":
		err = runCluster(ctx, o)
	case "route":
		err = runRoute(ctx)
	case "grpc":
		err = runGRPC(ctx, o.silos)
	default:
		err = fmt.Errorf("-mode %q: want reminders, procs, inproc, route or grpc", o.mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		stop()
		os.Exit(1)
	}
}

type row struct {
	Bench  string  `json:"bench"`
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Unit   string  `json:"unit"`
	Note   string  `json:"note,omitempty"`
}

func emit(r row) {
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}
