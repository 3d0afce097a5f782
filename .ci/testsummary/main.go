// Command testsummary reads `go test -json` output on stdin and prints what
// CI needs to see: each package's result, the output of every test that
// failed (and of a package that failed outside its tests: a build error, a
// panic in TestMain), and every test that was skipped, with its reason. It
// exits 1 if anything failed or was skipped: CI installs everything the
// tests need, so a skip there is a tier that did not run.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// event is one line of test2json's output.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	Elapsed    float64
	ImportPath string // build output (Go 1.24 and later)
}

func main() {
	out := map[string]*strings.Builder{} // by package and test
	key := func(e event) string { return e.Package + " " + e.Test }
	var failed, skipped []string
	passed := 0
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Println(string(line)) // not an event: go's own output
			continue
		}
		switch e.Action {
		case "build-output":
			fmt.Print(e.Output)
		case "output":
			b := out[key(e)]
			if b == nil {
				b = new(strings.Builder)
				out[key(e)] = b
			}
			b.WriteString(e.Output)
		case "fail":
			if b := out[key(e)]; b != nil {
				fmt.Print(b.String())
			}
			if e.Test != "" {
				failed = append(failed, e.Package+" "+e.Test)
			} else {
				failed = append(failed, e.Package)
				failed = append(failed, unfinished(out, e.Package)...)
			}
			delete(out, key(e))
		case "skip":
			if e.Test != "" {
				reason := ""
				if b := out[key(e)]; b != nil {
					reason = lastLines(b.String(), 3)
				}
				skipped = append(skipped, e.Package+" "+e.Test+"\n"+reason)
			}
			delete(out, key(e))
		case "pass":
			if e.Test == "" {
				fmt.Printf("ok\t%s\t%.1fs\n", e.Package, e.Elapsed)
			} else {
				passed++
			}
			delete(out, key(e))
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	for _, s := range skipped {
		fmt.Printf("--- SKIP: %s", s)
	}
	for _, f := range failed {
		fmt.Printf("--- FAIL: %s\n", f)
	}
	fmt.Printf("testsummary: %d passed, %d failed, %d skipped\n", passed, len(failed), len(skipped))
	if len(failed) > 0 || len(skipped) > 0 {
		os.Exit(1)
	}
}

// unfinished prints the output of the tests of pkg that started and
// never ended (the package failed while they ran: a timeout's goroutine
// dump is theirs), forgets them, and returns a line for each: its name
// and the panic that ended it.
func unfinished(out map[string]*strings.Builder, pkg string) []string {
	var names []string
	for k := range out {
		if test, ok := strings.CutPrefix(k, pkg+" "); ok && test != "" {
			names = append(names, test)
		}
	}
	sort.Strings(names)
	var lines []string
	for _, test := range names {
		b := out[pkg+" "+test]
		fmt.Printf("=== %s %s did not finish:\n%s", pkg, test, b.String())
		why := ""
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "panic: ") {
				why = ": " + l
				break
			}
		}
		lines = append(lines, fmt.Sprintf("%s %s (did not finish%s)", pkg, test, why))
		delete(out, pkg+" "+test)
	}
	return lines
}

// lastLines returns the last n non-blank lines of s, each ending in a
// newline.
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
