// Command bench measures agentsilo's runtime next to anchors measured in the
// same run, with the methodology of the Proto.Actor peer benchmark
// (../shared/peers/protoactor, "pabench"), so its JSON rows line up with the
// peer's row by row.
//
//	go run ./tests/bench local     chan anchor vs local Ask (interleaved), then activation rate
//	go run ./tests/bench memory    heap bytes per idle activation (fresh process)
//	go run ./tests/bench acl       Ask through a gateway, ACL off vs on (interleaved)
//	go run ./tests/bench gateway   raw gRPC unary anchor vs an SDK Ask through a gateway (interleaved)
//	go run ./tests/bench scale     local Ask among 1,000 vs 1,000,000 idle activations; heap per activation
//	go run ./tests/bench compare   runs the peer and ours, prints a side-by-side table
//	go run ./tests/bench report    tables from JSON lines (stdin or files)
//
// local and memory print one JSON object per line on stdout (fields as the
// peer's: bench, n, rates, rate_median, p50_us, p99_us, p999_us, p9999_us,
// max_us, mean_us, calls, errors, anchor, ratios, ratio_median; the memory row
// has bytes_per_grain, grains, activations_per_s, heap_before, heap_after and
// goroutines). Progress goes to stderr. Both take -cpuprofile, -memprofile,
// -mutexprofile and -trace.
//
// Closed loop: N caller goroutines each make a call, wait for its answer and
// call again. Each window is 1 s after 250 ms of unmeasured warm-up, with
// fresh callers. For each N, local runs 5 rounds of (chan window, local
// window); ratio_median is the median of the per-round ratios. Every latency
// goes into its caller's log-linear histogram (exact below 256 ns, within
// 0.8% above); quantiles are over all windows of a (bench, N).
//
//	go run ./tests/bench remote    grpc-stream anchor vs cross-silo Ask (interleaved), two processes
//
// remote starts an embedded etcd and a second process of this program
// (node-b: a silo and raw gRPC servers), then a silo here. For each N it
// runs 5 rounds of one window of each of three anchors and of the
// cross-silo Ask: grpc-stream is one Int64Value each way on one
// bidirectional gRPC stream to node-b, shared by the callers (as the
// peer's); grpc-env carries exactly the envelopes a cross-silo Ask puts on
// the wire, one per stream message, and grpc-env-batch the same envelopes
// batched as the peer stream batches them (both on gRPC's standard codec,
// with the peer stream's flow-control windows; see envanchor.go); remote is
// an Ask from this silo's runtime to one of 1,000 agents that node-b owns,
// and its anchor is grpc-env-batch (vs_ratio_medians gives its ratios to
// the other two). -only ROW measures one row alone, for a profile of it.
// With -peer-tls it also starts a second pair of silos whose peer port
// serves mutual TLS, and runs rounds of (remote window, remote-mtls
// window): what mutual TLS costs a cross-silo Ask.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"
)

const usage = `usage: go run ./tests/bench <suite> [flags]

  local     chan anchor vs local Ask, interleaved (N=1,64); then activation rate
  memory    heap bytes per idle activation, 100,000 activations (fresh process)
  acl       end-to-end Ask through a gateway, ACL off vs on (1,000 rules), interleaved
  gateway   raw gRPC unary call vs an SDK Ask through a gateway, interleaved
  scale     local Ask among 1,000 then 1,000,000 idle activations; heap per activation
  compare   run the Proto.Actor peer and ours in one go; side-by-side table
  report    tables from JSON lines of local/memory/compare (stdin or files)
  remote    raw gRPC stream anchors (8-byte integer; the Ask's envelopes, one per message and batched) vs cross-silo Ask, interleaved (N=1,64), two processes

Run "go run ./tests/bench <suite> -h" for a suite's flags.
`

// logOut receives progress lines and the runtime's warnings.
var logOut io.Writer = os.Stderr

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	suite, args := os.Args[1], os.Args[2:]
	if suite != "report" && suite != "compare" {
		logf("%s: pid %d, GOMAXPROCS=%d, NumCPU=%d, %s", suite, os.Getpid(), runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version())
	}
	var err error
	switch suite {
	case "local":
		err = runLocal(args, os.Stdout)
	case "memory", "mem":
		err = runMemory(args, os.Stdout)
	case "acl":
		err = runACL(args, os.Stdout)
	case "gateway":
		err = runGateway(args, os.Stdout)
	case "scale":
		err = runScale(args, os.Stdout)
	case "compare":
		err = runCompare(args, os.Stdout)
	case "report":
		err = runReport(args, os.Stdout)
	case "remote", "grpc-stream":
		err = runRemote(args, os.Stdout)
	case "node-b":
		err = runNodeB(args)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "bench: unknown suite %q\n\n%s", suite, usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", suite, err)
		os.Exit(1)
	}
}

// logf writes a progress line to stderr; stdout carries only JSON lines.
func logf(format string, a ...any) {
	fmt.Fprintf(logOut, "%s bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, a...))
}

// emit writes v as one JSON line.
func emit(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		logf("write: %v", err)
	}
}

// profFlags are the profiling flags of the measuring suites.
type profFlags struct {
	cpu, mem, mutex, trace string
}

func (p *profFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile of the measured part to this file")
	fs.StringVar(&p.mem, "memprofile", "", "write a heap profile (after the measured part) to this file")
	fs.StringVar(&p.mutex, "mutexprofile", "", "write a mutex contention profile of the measured part to this file")
	fs.StringVar(&p.trace, "trace", "", "write an execution trace of the measured part to this file")
}

// start starts the requested profiles; the returned function stops them and
// writes the heap profile.
func (p *profFlags) start() (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		stops = nil
	}
	if p.cpu != "" {
		f, err := os.Create(p.cpu)
		if err != nil {
			return stop, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return stop, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if p.trace != "" {
		f, err := os.Create(p.trace)
		if err != nil {
			stop()
			return stop, err
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			stop()
			return stop, err
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	if p.mutex != "" {
		runtime.SetMutexProfileFraction(1)
		stops = append(stops, func() {
			writeProfile("mutex", p.mutex)
			runtime.SetMutexProfileFraction(0)
		})
	}
	if p.mem != "" {
		path := p.mem
		stops = append(stops, func() { writeProfile("heap", path) })
	}
	return stop, nil
}

func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err != nil {
		logf("%s profile: %v", name, err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		logf("%s profile: %v", name, err)
	}
}
