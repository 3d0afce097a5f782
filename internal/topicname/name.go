// Package topicname is the grammar of topic names and patterns, and the
// matching of one against the other: a leaf, so that what needs names
// alone (the topic stores, the test kit of package grain/graintest) does
// not link a store.
package topicname

import (
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/names"
)

// Limits of topic names and patterns: each bounds what a client can make
// the silos store and match.
const (
	// MaxSegment is the longest segment of a topic name.
	MaxSegment = 64
	// MaxSegments is the most segments a name or pattern has.
	MaxSegments = 32
	// MaxName is the longest name or pattern, dots included (the owner
	// not counted).
	MaxName = 255
)

// Topic is a topic: a hierarchical dot-separated Name (`orders.created.eu`)
// that belongs to an Owner, as an agent's address does. Its canonical form
// is `owner:name`.
type Topic struct {
	Owner string
	Name  string
}

// String returns the canonical form `owner:name`.
func (t Topic) String() string { return t.Owner + ":" + t.Name }

// ParseTopic parses `owner:name`, or a relative `name` whose owner is
// owner (the sender's). Each segment of the name is
// [A-Za-z0-9_-]{1,64}; the owner is an agent owner
// ([A-Za-z0-9][A-Za-z0-9_.@-]{0,127}). The error is InvalidArgument and
// names the bad part.
func ParseTopic(s, owner string) (Topic, error) {
	o, name, err := split(s, owner, "topic")
	if err != nil {
		return Topic{}, err
	}
	if err := checkName(s, name, false); err != nil {
		return Topic{}, err
	}
	return Topic{Owner: o, Name: name}, nil
}

// Pattern selects topics of one owner: its segments are names' segments,
// `*` (exactly one segment) or `#` (zero or more segments). Its canonical
// form is `owner:pattern`, e.g. `acme:orders.*.eu` or `acme:orders.#`.
type Pattern struct {
	Owner string
	Text  string // the dot-separated pattern, without the owner
	segs  []string
}

// String returns the canonical form `owner:pattern`.
func (p Pattern) String() string { return p.Owner + ":" + p.Text }

// ParsePattern parses `owner:pattern`, or a relative `pattern` whose owner
// is owner. The owner is literal: a pattern selects topics of one owner.
func ParsePattern(s, owner string) (Pattern, error) {
	o, text, err := split(s, owner, "pattern")
	if err != nil {
		return Pattern{}, err
	}
	if err := checkName(s, text, true); err != nil {
		return Pattern{}, err
	}
	return Pattern{Owner: o, Text: text, segs: strings.Split(text, ".")}, nil
}

// Match reports whether t is one of the topics p selects.
func (p Pattern) Match(t Topic) bool {
	if t.Owner != p.Owner {
		return false
	}
	segs := p.segs
	if segs == nil {
		segs = strings.Split(p.Text, ".")
	}
	return matchSegs(segs, t.Name)
}

// MatchName reports whether the dot-separated name matches the
// dot-separated pattern (owners aside). Both are taken as they are,
// without validation.
func MatchName(pattern, name string) bool {
	return matchSegs(strings.Split(pattern, "."), name)
}

// matchSegs matches name's segments against pattern segments: `*` takes one
// segment, `#` zero or more. It is the classic wildcard match with
// backtracking to the last `#` only, so it takes O(len(pattern)·segments)
// steps at worst, never exponential time.
func matchSegs(pat []string, name string) bool {
	var segs [MaxSegments + 1]string
	n := splitInto(segs[:0], name)
	p, s := 0, 0
	star, mark := -1, 0 // the last # seen, and the segment it was tried at
	for s < len(n) {
		switch {
		case p < len(pat) && pat[p] == "#":
			star, mark = p, s
			p++
		case p < len(pat) && (pat[p] == "*" || pat[p] == n[s]):
			p++
			s++
		case star >= 0:
			mark++
			p, s = star+1, mark
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == "#" {
		p++
	}
	return p == len(pat)
}

// splitInto appends name's segments to dst, without allocating for names of
// up to MaxSegments+1 segments.
func splitInto(dst []string, name string) []string {
	for {
		i := strings.IndexByte(name, '.')
		if i < 0 {
			return append(dst, name)
		}
		dst = append(dst, name[:i])
		name = name[i+1:]
	}
}

// split cuts s into its owner (owner if s is relative) and the rest.
func split(s, owner, what string) (string, string, error) {
	o, rest, ok := strings.Cut(s, ":")
	if !ok {
		o, rest = owner, s
		if o == "" {
			return "", "", errs.New(codes.InvalidArgument, "%s %q: a relative name needs a sender with an owner; want owner:name", what, clip(s))
		}
	}
	if !names.Valid(o) {
		return "", "", errs.New(codes.InvalidArgument, "%s %q: bad owner %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", what, clip(s), clip(o))
	}
	return o, rest, nil
}

// checkName checks a name, or a pattern if wild.
func checkName(s, name string, wild bool) error {
	what := "topic"
	if wild {
		what = "pattern"
	}
	if name == "" {
		return errs.New(codes.InvalidArgument, "%s %q: empty name", what, clip(s))
	}
	if len(name) > MaxName {
		return errs.New(codes.InvalidArgument, "%s %q: name of %d bytes exceeds %d", what, clip(s), len(name), MaxName)
	}
	n := 0
	for seg := range strings.SplitSeq(name, ".") {
		n++
		if n > MaxSegments {
			return errs.New(codes.InvalidArgument, "%s %q: more than %d segments", what, clip(s), MaxSegments)
		}
		if wild && (seg == "*" || seg == "#") {
			continue
		}
		if !validSegment(seg) {
			want := "[A-Za-z0-9_-]{1,64}"
			if wild {
				want += ", * or #"
			}
			return errs.New(codes.InvalidArgument, "%s %q: bad segment %q: want %s", what, clip(s), clip(seg), want)
		}
	}
	return nil
}

// ValidSegment reports whether s is a segment of a topic name:
// [A-Za-z0-9_-]{1,64}.
func validSegment(s string) bool {
	if len(s) == 0 || len(s) > MaxSegment {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// clip keeps error messages short when a client sends a huge name.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
