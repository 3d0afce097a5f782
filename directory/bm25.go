package directory

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/agentsilo/agentsilo/grain"
)

// The search index: Okapi BM25 over one document per entry. A document is
// the entry's words, each field weighted by repeating its words: the name
// three times, skill names, tags and tool names twice, descriptions and
// examples once. An index is built whole from a snapshot of the entries and
// never changed (a new one replaces it), so searches need no lock.

// BM25's parameters, the usual ones.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// posting is one document a term occurs in, with the term's BM25 weight
// there but for its idf: tf*(k1+1)/(tf+k1*(1-b+b*len/avglen)), tf the
// term's weighted frequency in the document.
type posting struct {
	doc int32
	w   float32
}

// index is an immutable BM25 index of entries.
type index struct {
	entries []grain.DirectoryEntry
	terms   map[string][]posting
	norm    []float32 // per document: k1*(1-b+b*len/avglen)
	tags    [][]string
	rev     int64 // the etcd revision of the entries it holds
	// observed are the principals of the outside A2A agents at trust
	// observe, to their entries' names.
	observed map[string]string
}

// buildIndex indexes entries (which it keeps; the caller must not change
// them).
func buildIndex(entries []grain.DirectoryEntry, rev int64) *index {
	ix := &index{entries: entries, terms: make(map[string][]posting), norm: make([]float32, len(entries)), tags: make([][]string, len(entries)), rev: rev}
	for _, e := range entries {
		if e.Kind == grain.KindA2A && e.Trust == grain.TrustObserve && e.Principal != "" {
			if ix.observed == nil {
				ix.observed = make(map[string]string)
			}
			ix.observed[e.Principal] = e.Name
		}
	}
	lens := make([]int, len(entries))
	total := 0
	tf := make(map[string]int)
	for i := range entries {
		clear(tf)
		n := 0
		add := func(s string, weight int) {
			tokenize(s, func(t string) {
				tf[t] += weight
				n += weight
			})
		}
		e := &entries[i]
		add(e.Name, 3)
		add(e.Description, 1)
		var tags []string
		for _, sk := range e.Skills {
			add(sk.Name, 2)
			add(sk.Description, 1)
			for _, t := range sk.Tags {
				add(t, 2)
				tags = append(tags, strings.ToLower(t))
			}
			for _, x := range sk.Examples {
				add(x, 1)
			}
		}
		for _, tl := range e.Tools {
			add(tl.Name, 2)
			add(tl.Description, 1)
			tags = append(tags, strings.ToLower(tl.Name))
		}
		ix.tags[i] = tags
		for t, f := range tf {
			ix.terms[t] = append(ix.terms[t], posting{doc: int32(i), w: float32(f)}) // tf for now
		}
		lens[i] = n
		total += n
	}
	avg := 1.0
	if len(entries) > 0 && total > 0 {
		avg = float64(total) / float64(len(entries))
	}
	for i, l := range lens {
		ix.norm[i] = float32(bm25K1 * (1 - bm25B + bm25B*float64(l)/avg))
	}
	for _, ps := range ix.terms {
		for j := range ps {
			tf := ps[j].w
			ps[j].w = tf * (bm25K1 + 1) / (tf + ix.norm[ps[j].doc])
		}
	}
	return ix
}

// scratch is a search's per-document scores and the documents scored,
// reused across searches.
type scratch struct {
	acc     []float32
	touched []int32
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// search ranks the entries matching q, best first, at most limit.
func (ix *index) search(q grain.DirectoryQuery, limit int) []grain.DirectoryHit {
	var terms []string
	tokenize(q.Text, func(t string) {
		if !slices.Contains(terms, t) && len(terms) < maxQueryTerms {
			terms = append(terms, t)
		}
	})
	if len(terms) == 0 {
		var out []grain.DirectoryHit
		for i := range ix.entries {
			if len(out) == limit {
				break
			}
			if ix.keep(i, q) {
				out = append(out, grain.DirectoryHit{Entry: ix.entries[i]})
			}
		}
		return out
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	if cap(sc.acc) < len(ix.entries) {
		sc.acc = make([]float32, len(ix.entries))
	}
	acc := sc.acc[:len(ix.entries)]
	touched := sc.touched[:0]
	defer func() {
		for _, d := range touched {
			acc[d] = 0
		}
		sc.touched = touched[:0]
	}()
	// Rarest terms first (see score).
	slices.SortFunc(terms, func(a, b string) int { return cmp.Compare(len(ix.terms[a]), len(ix.terms[b])) })
	common := len(ix.entries)
	if len(ix.entries) >= pruneFrom {
		common = len(ix.entries) / 4
	}
	var pruned bool
	touched, pruned = ix.score(terms, acc, touched, common)
	if pruned && len(touched) < limit {
		for _, d := range touched {
			acc[d] = 0
		}
		touched, _ = ix.score(terms, acc, touched[:0], len(ix.entries))
	}
	hits := make([]grain.DirectoryHit, 0, min(len(touched), limit))
	worst := -1                       // the index in hits of the lowest score, once hits is full
	better := func(a, b int32) bool { // document a ranks before b
		if acc[a] != acc[b] {
			return acc[a] > acc[b]
		}
		return a < b
	}
	docs := make([]int32, 0, cap(hits))
	for _, d := range touched {
		if !ix.keep(int(d), q) {
			continue
		}
		if len(docs) < limit {
			docs = append(docs, d)
			if len(docs) == limit {
				worst = lowest(docs, better)
			}
			continue
		}
		if better(d, docs[worst]) {
			docs[worst] = d
			worst = lowest(docs, better)
		}
	}
	slices.SortFunc(docs, func(a, b int32) int {
		if better(a, b) {
			return -1
		}
		return 1
	})
	for _, d := range docs {
		hits = append(hits, grain.DirectoryHit{Entry: ix.entries[d], Score: float64(acc[d])})
	}
	return hits
}

// score adds the BM25 score of each term, rarest first, to the
// accumulators of the documents it occurs in, appending to touched the
// documents scored, and returns them. A term in more than common
// documents tells little: once a rarer term matched, it only adds to the
// scores of documents that matched already (pruned is then true), which
// saves scoring most of a large directory for a query with a common word
// (a document with only the common word scores below almost every one
// that matched a rarer word).
func (ix *index) score(terms []string, acc []float32, touched []int32, common int) (_ []int32, pruned bool) {
	n := float64(len(ix.entries))
	for _, t := range terms {
		ps := ix.terms[t]
		if len(ps) == 0 {
			continue
		}
		df := float64(len(ps))
		idf := float32(math.Log(1 + (n-df+0.5)/(df+0.5)))
		if len(ps) > common && len(touched) > 0 {
			pruned = true
			for _, p := range ps {
				if acc[p.doc] != 0 {
					acc[p.doc] += idf * p.w
				}
			}
			continue
		}
		for _, p := range ps {
			if acc[p.doc] == 0 {
				touched = append(touched, p.doc)
			}
			acc[p.doc] += idf * p.w
		}
	}
	return touched, pruned
}

// lowest returns the index in docs of the document ranked last.
func lowest(docs []int32, better func(a, b int32) bool) int {
	w := 0
	for i := 1; i < len(docs); i++ {
		if better(docs[w], docs[i]) {
			w = i
		}
	}
	return w
}

// keep reports whether document i passes q's kind and tag filters.
func (ix *index) keep(i int, q grain.DirectoryQuery) bool {
	if q.Kind != "" && ix.entries[i].Kind != q.Kind {
		return false
	}
	if q.Tag != "" {
		return slices.Contains(ix.tags[i], strings.ToLower(q.Tag))
	}
	return true
}

// pruneFrom is the size from which common terms are pruned (see search).
const pruneFrom = 1000

// maxQueryTerms bounds the distinct words of a query that count.
const maxQueryTerms = 32

// tokenize calls f with each word of s: lower-cased letters and digits,
// split at other characters and between a lower-case letter and an
// upper-case one (so "WeatherAgent" is "weather" and "agent"), plurals
// reduced ("forecasts" is "forecast"), stop words and one-letter words
// left out.
func tokenize(s string, f func(string)) {
	start := -1
	var prev rune
	emit := func(end int) {
		if start >= 0 && end > start {
			if w := normalize(s[start:end]); w != "" {
				f(w)
			}
		}
		start = -1
	}
	for i, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if start >= 0 && unicode.IsUpper(r) && unicode.IsLower(prev) {
				emit(i)
			}
			if start < 0 {
				start = i
			}
		default:
			emit(i)
		}
		prev = r
	}
	emit(len(s))
}

// normalize lower-cases a word, reduces a plural and drops stop words.
func normalize(w string) string {
	if utf8.RuneCountInString(w) < 2 {
		return ""
	}
	lower := true
	for i := 0; i < len(w); i++ {
		if c := w[i]; c >= 'A' && c <= 'Z' || c >= 0x80 {
			lower = false
			break
		}
	}
	if !lower {
		w = strings.ToLower(w)
	}
	if _, stop := stopWords[w]; stop {
		return ""
	}
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		w = w[:len(w)-3] + "y"
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:len(w)-1]
	}
	return w
}

// stopWords are English words too common to tell entries apart.
var stopWords = func() map[string]struct{} {
	m := make(map[string]struct{})
	for _, w := range strings.Fields("an and are as at be by can do does for from has have how in is it its me my of on or that the this to was what when where which who will with you your") {
		m[w] = struct{}{}
	}
	return m
}()

// byKindName orders entries by kind (types, then A2A agents, then MCP
// servers) and name.
func byKindName(a, b grain.DirectoryEntry) int {
	if c := cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func kindOrder(k string) int {
	switch k {
	case grain.KindType:
		return 0
	case grain.KindA2A:
		return 1
	}
	return 2
}
