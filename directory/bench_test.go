package directory

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// synthetic makes n entries of the three kinds whose words follow a Zipf
// law over a vocabulary of 5,000 words (as natural text does: a few words
// are everywhere, most are rare): a description of 20 words, three skills
// with a 10-word description, two tags and an 8-word example each (an MCP
// server: four tools instead).
func synthetic(n int, r *rand.Rand) []grain.DirectoryEntry {
	zipf := rand.NewZipf(r, 1.1, 1, 4999)
	words := func(k int) string {
		w := make([]string, k)
		for i := range w {
			w[i] = fmt.Sprintf("w%d", zipf.Uint64())
		}
		return strings.Join(w, " ")
	}
	kinds := []string{grain.KindType, grain.KindA2A, grain.KindMCP}
	out := make([]grain.DirectoryEntry, n)
	for i := range out {
		e := grain.DirectoryEntry{Name: fmt.Sprintf("entry%05d", i), Kind: kinds[i%3], Description: words(20)}
		e.Call = callOf(e.Kind, e.Name)
		if e.Kind == grain.KindMCP {
			for j := 0; j < 4; j++ {
				e.Tools = append(e.Tools, grain.DirectoryTool{Name: fmt.Sprintf("tool_%d", j), Description: words(12)})
			}
		} else {
			for j := 0; j < 3; j++ {
				e.Skills = append(e.Skills, grain.Skill{Name: fmt.Sprintf("skill%d", j), Description: words(10), Tags: []string{words(1), words(1)}, Examples: []string{words(8)}})
			}
		}
		out[i] = e
	}
	slices.SortFunc(out, byKindName)
	return out
}

// BenchmarkSearch measures a search of 10,000 entries: each op is one
// query of three words drawn as the entries' words are (so some are in
// most entries), limit 10. It reports the p50 and p99 of single searches,
// the index's heap bytes per entry (the entries and their postings), and
// the time to build it.
//
//	go test -run '^$' -bench BenchmarkSearch -benchtime 20000x ./directory/
func BenchmarkSearch(b *testing.B) {
	const n = 10_000
	r := rand.New(rand.NewPCG(1, 2))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	entries := synthetic(n, r)
	start := time.Now()
	ix := buildIndex(entries, 0)
	build := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perEntry := float64(after.HeapAlloc-before.HeapAlloc) / n

	zipf := rand.NewZipf(r, 1.1, 1, 4999)
	queries := make([]grain.DirectoryQuery, 1000)
	for i := range queries {
		queries[i] = grain.DirectoryQuery{Text: fmt.Sprintf("w%d w%d w%d", zipf.Uint64(), zipf.Uint64(), zipf.Uint64())}
	}
	lat := make([]time.Duration, 0, b.N)
	best := make([]time.Duration, len(queries)) // per query, its fastest run
	hits := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		hits += len(ix.search(queries[i%len(queries)], 10))
		d := time.Since(t)
		lat = append(lat, d)
		if k := i % len(queries); best[k] == 0 || d < best[k] {
			best[k] = d
		}
	}
	b.StopTimer()
	if hits == 0 {
		b.Fatal("no query found anything")
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	// On a machine shared with other work the wall-clock tail is mostly
	// waiting to run: the fastest of a query's runs is its own cost.
	if b.N >= 5*len(queries) {
		slices.Sort(best)
		b.ReportMetric(float64(best[len(best)/2].Nanoseconds())/1e3, "best-p50-µs")
		b.ReportMetric(float64(best[len(best)*99/100].Nanoseconds())/1e3, "best-p99-µs")
	}
	b.ReportMetric(perEntry, "heap-B/entry")
	b.ReportMetric(float64(build.Milliseconds()), "build-ms")
	runtime.KeepAlive(ix)
}
