package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// rowPairs lines our rows up with the peer's: our bench name, the peer's
// ("" for an anchor only we measure), N.
var rowPairs = []struct {
	ours, peer string
	n          int
}{
	{"chan", "chan", 1},
	{"local", "cluster-local", 1},
	{"chan", "chan", 64},
	{"local", "cluster-local", 64},
	{"activation", "activation", 1},
	{"activation", "activation", 64},
	{"grpc-stream", "grpc-stream", 1},
	{"grpc-env", "", 1},
	{"grpc-env-batch", "", 1},
	{"remote", "cluster-remote", 1},
	{"grpc-stream", "grpc-stream", 64},
	{"grpc-env", "", 64},
	{"grpc-env-batch", "", 64},
	{"remote", "cluster-remote", 64},
}

// rowIndex returns the index in rowPairs of our row bench at n, -1 if none.
func rowIndex(bench string, n int) int {
	for i, rp := range rowPairs {
		if rp.ours == bench && rp.n == n {
			return i
		}
	}
	return -1
}

// passResult is one pass of both sides.
type passResult struct {
	name       string
	ours, peer recs
}

// runCompare runs the peer's pabench and our suites in fresh processes, pass
// after pass, and prints a side-by-side table per pass and medians across
// passes.
func runCompare(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	passes := fs.Int("passes", 1, "passes; each runs local, memory and the two-process cross-silo rows on both sides")
	noRemote := fs.Bool("no-remote", false, "leave out the two-process cross-silo rows")
	portBase := fs.Int("peer-port-base", 17100, "first of the loopback ports the peer's two-node run uses (base+1 to base+20)")
	peerDir := fs.String("peer", "", "directory of the peer benchmark (default: $PEER_DIR, else ../shared/peers/protoactor beside the repo)")
	outDir := fs.String("out", "", "where to keep raw JSON lines and logs (default tests/bench/results/<stamp>)")
	from := fs.String("from", "", "print the tables of an earlier compare's -out directory instead of running")
	rounds := fs.Int("rounds", 5, "interleaved rounds per N (both sides)")
	warmup := fs.Duration("warmup", 250*time.Millisecond, "warm-up before each window (both sides)")
	window := fs.Duration("window", time.Second, "measured window (both sides)")
	grains := fs.Int("mem-grains", 100_000, "activations of the memory rows (both sides)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from != "" {
		results, err := loadPasses(*from)
		if err != nil {
			return err
		}
		printCompare(out, results)
		return nil
	}
	if *passes < 1 {
		return errors.New("-passes must be at least 1")
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	dir, err := findPeer(*peerDir, root)
	if err != nil {
		return err
	}
	if *outDir == "" {
		*outDir = filepath.Join(root, "tests", "bench", "results", time.Now().UTC().Format("20060102T150405Z"))
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	peerBin := filepath.Join(*outDir, "pabench")
	logf("compare: building the peer in %s", dir)
	build := exec.Command("go", "build", "-o", peerBin, ".")
	build.Dir, build.Stdout, build.Stderr = dir, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build peer: %w", err)
	}
	localArgs := []string{"local", "-rounds", strconv.Itoa(*rounds), "-warmup", warmup.String(), "-window", window.String()}
	var results []passResult
	for p := range *passes {
		name := strconv.Itoa(p + 1)
		ours := filepath.Join(*outDir, "ours-"+name+".jsonl")
		peer := filepath.Join(*outDir, "peer-"+name+".jsonl")
		steps := []struct {
			side, bin string
			args      []string
			file      string
		}{
			{"peer", peerBin, localArgs, peer},
			{"ours", self, localArgs, ours},
			{"peer", peerBin, []string{"mem", "-grains", strconv.Itoa(*grains)}, peer},
			{"ours", self, []string{"memory", "-grains", strconv.Itoa(*grains)}, ours},
		}
		if !*noRemote {
			b := *portBase
			ports := []string{"-remote-a", strconv.Itoa(b + 1), "-remote-b", strconv.Itoa(b + 2), "-am-a", strconv.Itoa(b + 11), "-am-b", strconv.Itoa(b + 12), "-addr", "127.0.0.1:" + strconv.Itoa(b+20)}
			steps = append(steps,
				struct {
					side, bin string
					args      []string
					file      string
				}{"peer", "", append([]string{"node-a"}, ports...), peer},
				struct {
					side, bin string
					args      []string
					file      string
				}{"ours", self, []string{"remote", "-rounds", strconv.Itoa(*rounds), "-warmup", warmup.String(), "-window", window.String()}, ours})
		}
		if p%2 == 1 { // alternate which side goes first, so drift favours neither
			for i := 0; i+1 < len(steps); i += 2 {
				steps[i], steps[i+1] = steps[i+1], steps[i]
			}
		}
		for _, f := range []string{ours, peer} {
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				return err
			}
		}
		for _, s := range steps {
			logf("compare: pass %s/%d: %s %s (loadavg %s)", name, *passes, s.side, strings.Join(s.args, " "), loadavg())
			c0 := cpuTimes()
			var err error
			if s.side == "peer" && s.args[0] == "node-a" {
				err = runPeerNodes(peerBin, s.args[1:], s.file, filepath.Join(*outDir, s.side+"-"+name+".log"))
			} else {
				err = runStep(s.bin, s.args, s.file, filepath.Join(*outDir, s.side+"-"+name+".log"))
			}
			if err != nil {
				return fmt.Errorf("pass %s, %s %s: %w", name, s.side, s.args[0], err)
			}
			logf("compare: pass %s: %s %s done; CPU steal by the hypervisor during it: %s", name, s.side, s.args[0], stealShare(c0, cpuTimes()))
		}
		pr, err := loadPass(*outDir, name)
		if err != nil {
			return err
		}
		results = append(results, pr)
	}
	fmt.Fprintf(out, "compare: agentsilo vs Proto.Actor peer (%s), %s; %s, %d cores, GOMAXPROCS=%d; loadavg %s; raw results in %s\n",
		dir, time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), loadavg(), *outDir)
	printCompare(out, results)
	return nil
}

// runPeerNodes runs the peer's two-process rows as its run.sh does: node-b
// in the background (its own cluster member and the raw gRPC echo server),
// node-a driving, with their stderr appended to log and node-a's JSON lines
// to jsonl.
func runPeerNodes(bin string, ports []string, jsonl, log string) error {
	lf, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	b := exec.Command(bin, append(append([]string{"node-b"}, ports...), "-lifetime", "300s")...)
	b.Stderr = lf
	if err := b.Start(); err != nil {
		return err
	}
	defer func() {
		b.Process.Kill()
		b.Wait()
	}()
	return runStep(bin, append([]string{"node-a"}, ports...), jsonl, log)
}

// runStep runs one measuring process, appending its stdout to jsonl and its
// stderr to log.
func runStep(bin string, args []string, jsonl, log string) error {
	o, err := os.OpenFile(jsonl, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer o.Close()
	l, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer l.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = o, l
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w (log: %s)", err, log)
	}
	return nil
}

func loadPass(dir, name string) (passResult, error) {
	ours, err := readRecsFile(filepath.Join(dir, "ours-"+name+".jsonl"))
	if err != nil {
		return passResult{}, err
	}
	peer, err := readRecsFile(filepath.Join(dir, "peer-"+name+".jsonl"))
	if err != nil {
		return passResult{}, err
	}
	return passResult{name: name, ours: ours, peer: peer}, nil
}

func loadPasses(dir string) ([]passResult, error) {
	var out []passResult
	for p := 1; ; p++ {
		name := strconv.Itoa(p)
		if _, err := os.Stat(filepath.Join(dir, "ours-"+name+".jsonl")); err != nil {
			break
		}
		pr, err := loadPass(dir, name)
		if err != nil {
			return nil, err
		}
		out = append(out, pr)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ours-1.jsonl in %s", dir)
	}
	return out, nil
}

// repoRoot returns the nearest directory at or above the working directory
// holding go.mod.
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("no go.mod at or above the working directory")
		}
		d = up
	}
}

func findPeer(flagDir, root string) (string, error) {
	for _, d := range []string{flagDir, os.Getenv("PEER_DIR"), filepath.Join(root, "..", "shared", "peers", "protoactor")} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "local.go")); err == nil {
			return filepath.Abs(d)
		}
	}
	return "", errors.New("peer benchmark not found: give -peer DIR")
}

// side is one side's figures for one row, taken from one pass or as medians
// across passes.
type side struct {
	ok                    bool
	rate, p50, p99, p999  float64
	vsChan                float64 // rate / same-round anchor rate (median of rounds), 0 if none
	vsInt                 float64 // remote: rate / same-round 8-byte integer stream rate (median of rounds)
	bytes, activationsPer float64
	cpu                   float64 // µs of CPU per call, every process of the row summed; 0 if not measured
}

func pick(rs recs, bench string, n int) side {
	r := rs.find(bench, n)
	if r == nil {
		return side{}
	}
	s := side{ok: true, rate: r.RateMedian, p50: r.P50, p99: r.P99, p999: r.P999, bytes: r.BytesPerGrain, activationsPer: r.ActivationsPerS, cpu: r.cpuPerCall(), vsInt: r.VsMedians["grpc-stream"]}
	if r.RatioMedian != nil {
		s.vsChan = *r.RatioMedian
	} else if a := rs.find("chan", n); a != nil && bench != "chan" && a.RateMedian > 0 {
		s.vsChan = r.RateMedian / a.RateMedian
	}
	return s
}

// medianSide returns the field-wise median of the passes that have the row.
func medianSide(ss []side) side {
	var f [9][]float64
	for _, s := range ss {
		if !s.ok {
			continue
		}
		for i, v := range []float64{s.rate, s.p50, s.p99, s.p999, s.vsChan, s.bytes, s.activationsPer, s.cpu, s.vsInt} {
			f[i] = append(f[i], v)
		}
	}
	if len(f[0]) == 0 {
		return side{}
	}
	return side{ok: true, rate: median(f[0]), p50: median(f[1]), p99: median(f[2]), p999: median(f[3]),
		vsChan: median(f[4]), bytes: median(f[5]), activationsPer: median(f[6]), cpu: median(f[7]), vsInt: median(f[8])}
}

// table is the side-by-side figures of one pass (or of the medians).
type table struct {
	rows  [][2]side // per rowPairs entry: ours, peer
	mem   [2]side
	rateX []float64 // per row: ours/peer rate; for medians, the median of the per-pass ratios
}

func tableOf(p passResult) table {
	t := table{}
	for _, rp := range rowPairs {
		o, q := pick(p.ours, rp.ours, rp.n), pick(p.peer, rp.peer, rp.n)
		t.rows = append(t.rows, [2]side{o, q})
		x := 0.0
		if o.ok && q.ok && q.rate > 0 {
			x = o.rate / q.rate
		}
		t.rateX = append(t.rateX, x)
	}
	t.mem = [2]side{pick(p.ours, "memory", 0), pick(p.peer, "memory", 0)}
	return t
}

func medianTable(ts []table) table {
	out := table{}
	for i := range rowPairs {
		var o, q []side
		var xs []float64
		for _, t := range ts {
			o, q = append(o, t.rows[i][0]), append(q, t.rows[i][1])
			if t.rateX[i] > 0 {
				xs = append(xs, t.rateX[i])
			}
		}
		out.rows = append(out.rows, [2]side{medianSide(o), medianSide(q)})
		out.rateX = append(out.rateX, median(xs))
	}
	var o, q []side
	for _, t := range ts {
		o, q = append(o, t.mem[0]), append(q, t.mem[1])
	}
	out.mem = [2]side{medianSide(o), medianSide(q)}
	return out
}

func printCompare(out io.Writer, passes []passResult) {
	fmt.Fprintln(out, "vs anchor: the median of the per-round rate ratios to the anchor measured in the same rounds: local and activation to chan, grpc-env and grpc-env-batch to grpc-stream (the 8-byte integer stream), remote to grpc-env-batch (the same envelopes as a cross-silo Ask's, batched as the peer stream batches them)")
	var ts []table
	for _, p := range passes {
		t := tableOf(p)
		ts = append(ts, t)
		fmt.Fprintf(out, "\npass %s\n", p.name)
		printTable(out, t)
	}
	final := ts[0]
	if len(ts) > 1 {
		final = medianTable(ts)
		fmt.Fprintf(out, "\nmedians across %d passes (ours/peer: median of the per-pass ratios)\n", len(ts))
		printTable(out, final)
	}
	printTargets(out, final)
}

func printTable(out io.Writer, t table) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row (ours | peer)\tN\tours/s\tpeer/s\tours/peer\tp50 µs\tpeer\tp99 µs\tpeer\tp99.9 µs\tpeer\tvs anchor\tpeer\tours CPU µs/call\t")
	for i, rp := range rowPairs {
		o, q := t.rows[i][0], t.rows[i][1]
		name := rp.ours
		if rp.peer != rp.ours && rp.peer != "" {
			name += " | " + rp.peer
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, rp.n,
			opt(o.ok, num(o.rate)), opt(q.ok, num(q.rate)), opt(t.rateX[i] > 0, fmt.Sprintf("x%.2f", t.rateX[i])),
			opt(o.ok, us(o.p50)), opt(q.ok, us(q.p50)), opt(o.ok, us(o.p99)), opt(q.ok, us(q.p99)),
			opt(o.ok, us(o.p999)), opt(q.ok, us(q.p999)),
			opt(o.vsChan > 0, pct(o.vsChan)), opt(q.vsChan > 0, pct(q.vsChan)), opt(o.cpu > 0, us(o.cpu)))
	}
	tw.Flush()
	o, q := t.mem[0], t.mem[1]
	if o.ok || q.ok {
		fmt.Fprintf(out, "memory: %s B per idle activation (peer %s B, ours/peer x%.2f); %s activations/s (peer %s, x%.2f)\n",
			opt(o.ok, num(o.bytes)), opt(q.ok, num(q.bytes)), safeDiv(o.bytes, q.bytes),
			opt(o.ok, num(o.activationsPer)), opt(q.ok, num(q.activationsPer)), safeDiv(o.activationsPer, q.activationsPer))
	}
}

// printTargets checks the figures against the targets.
func printTargets(out io.Writer, t table) {
	fmt.Fprintln(out, "\ntargets")
	check := func(ok bool, format string, a ...any) {
		mark := "MISS"
		if ok {
			mark = "ok  "
		}
		fmt.Fprintf(out, "  %s %s\n", mark, fmt.Sprintf(format, a...))
	}
	for i, rp := range rowPairs {
		o := t.rows[i][0]
		switch {
		case rp.ours == "local":
			check(t.rateX[i] >= 3, "local N=%d rate >= 3x peer's cluster-local: x%.2f", rp.n, t.rateX[i])
			if rp.n == 64 {
				check(o.ok && o.p999 < 2000, "local N=64 p99.9 < 2 ms: %s µs", us(o.p999))
			}
		case rp.ours == "activation":
			check(t.rateX[i] >= 3, "activation N=%d rate >= 3x peer's: x%.2f", rp.n, t.rateX[i])
		case rp.ours == "remote":
			// The cross-silo goals are against the like-for-like anchor:
			// the same envelopes on a raw gRPC stream, batched as the peer
			// stream batches them, measured in the same rounds.
			var a side
			if j := rowIndex("grpc-env-batch", rp.n); j >= 0 {
				a = t.rows[j][0]
			}
			if !a.ok || !o.ok {
				check(false, "remote N=%d: no remote row or no grpc-env-batch anchor row", rp.n)
				continue
			}
			cpuX := safeDiv(o.cpu, a.cpu)
			if rp.n == 64 {
				check(o.vsChan >= 0.9, "remote N=64 rate >= 0.9x the batched envelope stream: x%.2f", o.vsChan)
				check(a.cpu > 0 && cpuX <= 1.15, "remote N=64 CPU per call <= 1.15x the batched envelope stream's: %s µs, x%.2f", us(o.cpu), cpuX)
			}
			if rp.n == 1 {
				check(a.p50 > 0 && o.p50 <= 1.05*a.p50, "remote N=1 p50 <= 1.05x the batched envelope stream's: %s µs, x%.2f", us(o.p50), safeDiv(o.p50, a.p50))
			}
			fmt.Fprintf(out, "       (remote N=%d: x%.2f the batched envelope stream's rate, CPU per call x%.2f; x%.2f the 8-byte integer stream's; x%.2f the peer's cluster-remote)\n",
				rp.n, o.vsChan, cpuX, o.vsInt, t.rateX[i])
		}
	}
	o, q := t.mem[0], t.mem[1]
	check(o.ok && q.ok && o.activationsPer >= 3*q.activationsPer, "memory activations/s >= 3x peer's: x%.2f", safeDiv(o.activationsPer, q.activationsPer))
	check(o.ok && o.bytes <= 1000, "<= 1,000 heap bytes per idle activation: %s", num(o.bytes))
}

func opt(ok bool, s string) string {
	if !ok {
		return "-"
	}
	return s
}

func pct(x float64) string { return strconv.FormatFloat(100*x, 'f', 1, 64) + "%" }

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// loadavg returns the 1, 5 and 15 minute load averages ("?" off Linux), to
// show whether other work shared the cores.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuTimes returns the aggregate jiffies of /proc/stat's cpu line (nil off
// Linux): user nice system idle iowait irq softirq steal ...
func cpuTimes() []uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return nil
	}
	var out []uint64
	for _, x := range f[1:] {
		v, _ := strconv.ParseUint(x, 10, 64)
		out = append(out, v)
	}
	return out
}

// stealShare is the share of CPU time stolen by the hypervisor between two
// cpuTimes readings.
func stealShare(a, b []uint64) string {
	if len(a) < 8 || len(b) < 8 {
		return "?"
	}
	var total uint64
	for i := range min(len(a), len(b), 8) {
		total += b[i] - a[i]
	}
	if total == 0 {
		return "?"
	}
	return pct(float64(b[7]-a[7]) / float64(total))
}
