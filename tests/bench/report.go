package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

// rec is any JSON line written by this program or by the peer's pabench:
// a row, or the memory figures.
type rec struct {
	row
	BytesPerGrain   float64 `json:"bytes_per_grain"`
	Grains          int     `json:"grains"`
	ActivationsPerS float64 `json:"activations_per_s"`
}

// cpuPerCall is the CPU time per call of all the processes r accounts, in
// µs; 0 if it has none.
func (r *rec) cpuPerCall() float64 {
	var sum float64
	for _, v := range r.CPU {
		sum += v
	}
	return sum
}

// recs is one pass of one side (ours or the peer's).
type recs []rec

func (rs recs) find(bench string, n int) *rec {
	for i := range rs {
		if rs[i].Bench == bench && (rs[i].N == n || bench == "memory") {
			return &rs[i]
		}
	}
	return nil
}

// readRecs reads JSON lines, skipping lines that are not JSON objects.
func readRecs(r io.Reader) (recs, error) {
	var out recs
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var x rec
		if err := json.Unmarshal([]byte(line), &x); err != nil {
			return nil, fmt.Errorf("bad JSON line %q: %w", line, err)
		}
		out = append(out, x)
	}
	return out, sc.Err()
}

func readRecsFile(path string) (recs, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readRecs(f)
}

// runReport prints a table of our rows per file (or of stdin).
func runReport(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		rs, err := readRecs(os.Stdin)
		if err != nil {
			return err
		}
		printOurs(out, "stdin", rs)
		return nil
	}
	for _, f := range fs.Args() {
		rs, err := readRecsFile(f)
		if err != nil {
			return err
		}
		printOurs(out, f, rs)
	}
	return nil
}

// printOurs prints one pass of our rows in the peer report's layout.
func printOurs(out io.Writer, name string, rs recs) {
	fmt.Fprintf(out, "pass %s\n", name)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "bench\tN\tcalls/s\tp50 µs\tp99 µs\tp99.9 µs\tp99.99 µs\tmean µs\tvs anchor\t")
	for _, r := range rs {
		if r.Bench == "memory" {
			continue
		}
		vs := "(anchor)"
		if r.Anchor != "" {
			if a := rs.find(r.Anchor, r.N); a != nil && a.RateMedian > 0 {
				ratio := r.RateMedian / a.RateMedian
				if r.RatioMedian != nil {
					ratio = *r.RatioMedian
				}
				vs = fmt.Sprintf("%.1f%% of %s, p50 x%.1f", 100*ratio, r.Anchor, r.P50/a.P50)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Bench, r.N, num(r.RateMedian), us(r.P50), us(r.P99), us(r.P999), us(r.P9999), us(r.Mean), vs)
	}
	tw.Flush()
	if m := rs.find("memory", 0); m != nil {
		fmt.Fprintf(out, "memory: %s B per idle activation (%s activations, %s activations/s)\n", num(m.BytesPerGrain), num(float64(m.Grains)), num(m.ActivationsPerS))
	}
}

// num formats x with thousands separators and no decimals.
func num(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	if x < 0 {
		s = strconv.FormatInt(int64(x-0.5), 10)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// us formats a latency in µs with three significant digits.
func us(x float64) string {
	switch {
	case x >= 1000:
		return num(x)
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}
