package topics

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"orders.created", "orders.created", true},
		{"orders.created", "orders.created.eu", false},
		{"orders.created", "orders", false},
		{"orders.*", "orders.created", true},
		{"orders.*", "orders", false},
		{"orders.*", "orders.created.eu", false},
		{"*.created", "orders.created", true},
		{"*.*.eu", "orders.created.eu", true},
		{"*", "orders", true},
		{"*", "orders.created", false},
		{"#", "orders", true},
		{"#", "orders.created.eu", true},
		{"orders.#", "orders", true},
		{"orders.#", "orders.created", true},
		{"orders.#", "orders.created.eu", true},
		{"orders.#", "order", false},
		{"orders.#", "ordersx.created", false},
		{"#.eu", "eu", true},
		{"#.eu", "orders.created.eu", true},
		{"#.eu", "orders.created.us", false},
		{"orders.#.eu", "orders.eu", true},
		{"orders.#.eu", "orders.created.eu", true},
		{"orders.#.eu", "orders.a.b.c.eu", true},
		{"orders.#.eu", "orders.a.b.c.us", false},
		{"#.#", "a", true},
		{"#.*", "a", true},
		{"#.*", "a.b.c", true},
		{"*.#.*", "a", false},
		{"*.#.*", "a.b", true},
		{"a.#.b.#.c", "a.x.b.y.z.c", true},
		{"a.#.b.#.c", "a.x.c.y.b", false},
		{"a.#.b.#.c", "a.b.c", true},
		{"#.b.#", "a.b.b.c", true},
		{"Orders", "orders", false}, // case-sensitive
	} {
		if got := MatchName(tc.pattern, tc.name); got != tc.want {
			t.Errorf("MatchName(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
		p, err := ParsePattern("acme:"+tc.pattern, "")
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tc.pattern, err)
		}
		top, err := ParseTopic(tc.name, "acme")
		if err != nil {
			t.Fatalf("ParseTopic(%q): %v", tc.name, err)
		}
		if got := p.Match(top); got != tc.want {
			t.Errorf("%v.Match(%v) = %v, want %v", p, top, got, tc.want)
		}
		if p.Match(Topic{Owner: "other", Name: tc.name}) {
			t.Errorf("%v matches a topic of another owner", p)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, owner string
		want      string // canonical, or "" for InvalidArgument
		pattern   bool
	}{
		{"acme:orders.created", "", "acme:orders.created", false},
		{"orders.created", "bob", "bob:orders.created", false},
		{"orders.created", "", "", false},            // relative without a sender
		{"acme:", "", "", false},                     // empty name
		{"acme:orders..created", "", "", false},      // empty segment
		{"acme:orders.created.", "", "", false},      // trailing dot
		{"acme:orders.*", "", "", false},             // no wildcards in topics
		{"acme:orders.#", "", "", false},             //
		{"acme:orders.*", "", "acme:orders.*", true}, // but in patterns
		{"acme:#", "", "acme:#", true},
		{"acme:or*ders", "", "", true}, // a wildcard is a whole segment
		{"acme:a:b", "", "", false},    // a colon in the name
		{"-acme:a", "", "", false},     // bad owner
		{"a c:x", "", "", false},
		{"acme:" + strings.Repeat("a", 65), "", "", false},
		{"acme:" + strings.Repeat("a.", 32) + "a", "", "", false}, // 33 segments
		{"acme:" + strings.Repeat("a.", 31) + "a", "", "acme:" + strings.Repeat("a.", 31) + "a", false},
		{"acme:" + strings.Repeat("abcdefgh.", 29) + "a", "", "", false}, // too long
		{"acme:orders_v2.créé", "", "", false},                           // not ASCII
	} {
		var got string
		var err error
		if tc.pattern {
			var p Pattern
			p, err = ParsePattern(tc.in, tc.owner)
			got = p.String()
		} else {
			var top Topic
			top, err = ParseTopic(tc.in, tc.owner)
			got = top.String()
		}
		if tc.want == "" {
			if errs.Code(err) != codes.InvalidArgument {
				t.Errorf("parse(%q, %q) = %q, %v; want InvalidArgument", tc.in, tc.owner, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parse(%q, %q) = %q, %v; want %q", tc.in, tc.owner, got, err, tc.want)
		}
	}
}

// reference is the obvious recursive matcher the fuzz test checks
// matchSegs against.
func reference(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	switch pat[0] {
	case "#":
		for i := 0; i <= len(name); i++ {
			if reference(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(name) > 0 && reference(pat[1:], name[1:])
	}
	return len(name) > 0 && name[0] == pat[0] && reference(pat[1:], name[1:])
}

// FuzzMatch: the matcher agrees with the recursive reference on every
// valid pattern and name, and parsing never panics.
func FuzzMatch(f *testing.F) {
	for _, seed := range [][2]string{
		{"orders.#", "orders.created.eu"},
		{"#.eu", "eu"},
		{"*.#.*", "a"},
		{"a.#.b.#.c", "a.x.b.y.z.c"},
		{"#.#.#", "a.b"},
		{"a.*.b", "a.b"},
		{"", ""},
		{"a..b", "a.b"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		p, perr := ParsePattern("o:"+pattern, "")
		top, terr := ParseTopic("o:"+name, "")
		if perr != nil || terr != nil {
			if perr != nil && errs.Code(perr) != codes.InvalidArgument || terr != nil && errs.Code(terr) != codes.InvalidArgument {
				t.Fatalf("parse errors must be InvalidArgument: %v, %v", perr, terr)
			}
			return
		}
		// Bound the reference's exponential worst case.
		if strings.Count(pattern, "#") > 6 {
			return
		}
		want := reference(strings.Split(pattern, "."), strings.Split(name, "."))
		if got := p.Match(top); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", pattern, name, got, want)
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	p, _ := ParsePattern("acme:orders.#.eu", "")
	top, _ := ParseTopic("acme:orders.created.paid.eu", "")
	b.ReportAllocs()
	for b.Loop() {
		if !p.Match(top) {
			b.Fatal("no match")
		}
	}
}
