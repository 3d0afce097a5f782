// Command failover measures how long the agents of a silo killed with
// kill -9 are unreachable: from the SIGKILL to the first successful Ask of an
// agent that lived on the dead silo, through a surviving gateway.
//
//	go run ./tests/failover -runs 20
//
//	go run ./tests/failover -runs 20 -mode hang
//
//	go run ./tests/failover -runs 20 -mode hang -lease-ttl 3s
//
// It starts three silo processes with the default membership settings, or
// -lease-ttl (tests/testcluster, an embedded etcd in this process), and per
// run:
// activates -agents Journal agents owned by the victim (silo run%3), kills
// the victim, asks one of its agents through a survivor until it answers
// (each Ask bounded by -retry, one started every -pace at most), then waits
// for all of its agents to answer, restarts the victim and waits for the
// three to agree on the members.
//
// -mode kill (the default) is kill -9: on one machine the kernel refuses
// connections to the dead process's ports at once, which the silos take as
// proof of death. -mode hang freezes the victim with SIGSTOP instead, as a
// hung host or a cut network: its sockets stay open, so gossip finds it
// dead and its agents are taken over when its lease expires (about one
// --lease-ttl after the freeze); the time is measured from the freeze, to
// within -retry (a probe sent to the frozen silo waits out its deadline). Progress goes to stderr; stdout gets one JSON object per run
// (bench "failover-run") and a summary (bench "failover": runs, p50_ms,
// p99_ms, mean_ms, min_ms, max_ms, and all_p50_ms / all_p99_ms for the time
// until every agent of the dead silo answered again). The single-activation
// invariant is checked over the journal at the end (overlaps in the
// summary).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

func main() {
	runs := flag.Int("runs", 20, "number of kills")
	agents := flag.Int("agents", 20, "agents activated on the victim before each kill")
	retry := flag.Duration("retry", 500*time.Millisecond, "deadline of each probing Ask")
	pace := flag.Duration("pace", 10*time.Millisecond, "least time from the start of one probing Ask to the next")
	leaseTTL := flag.Duration("lease-ttl", 0, "the silos' --lease-ttl (0: their default)")
	mode := flag.String("mode", "kill", "kill: SIGKILL the victim (its refused connections tell the peers at once); hang: SIGSTOP it (a hung host: found by gossip), then SIGKILL it once measured")
	flag.Parse()
	if *runs < 1 || *agents < 1 || *retry <= 0 || *pace < 0 || *mode != "kill" && *mode != "hang" {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer testcluster.Cleanup()
	var sum summary
	failed := testcluster.Run(ctx, func(tb testcluster.TB) {
		var args []string
		if *leaseTTL > 0 {
			args = []string{"--lease-ttl", leaseTTL.String()}
		}
		sum = measure(tb, *mode, *runs, *agents, *retry, *pace, args)
		sum.LeaseTTL = leaseTTL.String()
	})
	if failed {
		testcluster.Cleanup()
		os.Exit(1)
	}
	emit(sum)
}

type summary struct {
	Bench    string  `json:"bench"`
	Mode     string  `json:"mode"`
	LeaseTTL string  `json:"lease_ttl"` // "0s": the silos' default
	Runs     int     `json:"runs"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Mean     float64 `json:"mean_ms"`
	Min      float64 `json:"min_ms"`
	Max      float64 `json:"max_ms"`
	AllP50   float64 `json:"all_p50_ms"`
	AllP99   float64 `json:"all_p99_ms"`
	Agents   int     `json:"agents"`
	RetryMS  float64 `json:"retry_ms"`
	PaceMS   float64 `json:"pace_ms"`
	Overlaps int     `json:"overlaps"`
}

type runRow struct {
	Bench  string  `json:"bench"`
	Run    int     `json:"run"`
	Victim string  `json:"victim"`
	First  float64 `json:"first_ms"`
	All    float64 `json:"all_ms"`
	Tries  int     `json:"tries"`
}

func emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of numbers and strings
	}
	fmt.Println(string(b))
}

func measure(tb testcluster.TB, mode string, runs, agents int, retry, pace time.Duration, args []string) summary {
	c := testcluster.Start(tb, testcluster.Options{Silos: 3, Args: args})
	var first, all []float64
	for run := range runs {
		victim := run % c.Len()
		name := c.Silo(victim).Name
		survivor := (victim + 1) % c.Len()
		cl := c.Client(tb, survivor, (survivor+1)%c.Len())

		// Agents the victim owns, activated there.
		var addrs []string
		for k := 0; len(addrs) < agents; k++ {
			a := fmt.Sprintf("Journal:%s:r%d-%d", testcluster.Principal, run, k)
			if c.Owner(a) == name {
				addrs = append(addrs, a)
			}
		}
		// Activated on the victim, through every gateway (which also
		// waits out a restarted victim's peer connections).
		for _, a := range addrs {
			c.WaitOwner(a, name)
		}

		start := time.Now()
		if mode == "hang" {
			c.Freeze(victim)
		} else {
			c.Kill(victim)
		}
		// Bounds the wait for the agents of one run: failing it is a
		// failure, not a figure.
		runCtx, cancelRun := context.WithTimeout(tb.Context(), time.Minute)
		tries := 0
		var firstAt time.Time
		for firstAt.IsZero() {
			if runCtx.Err() != nil {
				tb.Fatalf("run %d: %s never answered after the kill of %s: %v", run, addrs[0], name, runCtx.Err())
			}
			tries++
			tryStart := time.Now()
			ctx, cancel := context.WithTimeout(runCtx, retry)
			r, err := cl.Ask(ctx, addrs[0], &client.Message{Message: "failover"})
			cancel()
			if err == nil && r.Message != name {
				firstAt = time.Now()
				break
			}
			if err == nil {
				tb.Fatalf("%s answered from the killed %s", addrs[0], name)
			}
			if d := pace - time.Since(tryStart); d > 0 {
				pause(runCtx, d) // a refused call returns at once: pace the retries
			}
		}
		// Every agent of the dead silo answers again.
		for _, a := range addrs[1:] {
			for {
				ctx, cancel := context.WithTimeout(runCtx, retry)
				_, err := cl.Ask(ctx, a, &client.Message{Message: "failover"})
				cancel()
				if err == nil {
					break
				}
				if runCtx.Err() != nil {
					tb.Fatalf("run %d: %s never answered after the kill of %s: %v", run, a, name, err)
				}
			}
		}
		allAt := time.Now()
		cancelRun()
		if mode == "hang" {
			c.Kill(victim) // still frozen: its activations ended at the freeze
		}
		row := runRow{Bench: "failover-run", Run: run, Victim: name, First: ms(firstAt.Sub(start)), All: ms(allAt.Sub(start)), Tries: tries}
		emit(row)
		first = append(first, row.First)
		all = append(all, row.All)

		c.Restart(victim)
		c.WaitMembers(c.Len())
	}
	acts := c.CheckJournal()
	tb.Logf("failover: %d runs, %d activations in the journal", runs, len(acts))
	return summary{
		Bench: "failover", Mode: mode, Runs: runs, Agents: agents, RetryMS: ms(retry), PaceMS: ms(pace),
		P50: quantile(first, 0.50), P99: quantile(first, 0.99), Mean: mean(first),
		Min: quantile(first, 0), Max: quantile(first, 1),
		AllP50: quantile(all, 0.50), AllP99: quantile(all, 0.99),
		Overlaps: len(testcluster.Overlaps(acts)),
	}
}

// pause waits d or until ctx ends: the pacing of a retry loop.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

// quantile is the nearest-rank quantile q of xs (0: min, 1: max).
func quantile(xs []float64, q float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func mean(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return math.Round(t/float64(len(xs))*100) / 100
}
