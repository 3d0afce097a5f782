package acl

import (
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Patterns match owners and aliases (OwnerPattern, AgentPattern): `*` matches
// everything, `prefix*` every name that starts with prefix, anything else
// exactly that name. Matching ignores case. A pattern's characters are those
// of names ([A-Za-z0-9_.@-]) with at most one `*`, at the end.
const maxNameLen = 128

type pattern struct {
	lit   string // lower case; "" and !exact for `*`
	exact bool   // false: lit is a prefix
}

func compilePattern(what, s string) (pattern, error) {
	if s == "" {
		return pattern{}, errs.New(codes.InvalidArgument, "%s: empty pattern; want *, prefix* or a name", what)
	}
	if len(s) > maxNameLen+1 {
		return pattern{}, errs.New(codes.InvalidArgument, "%s %q: longer than %d characters", what, clip(s), maxNameLen+1)
	}
	lit, star := strings.CutSuffix(s, "*")
	for i := 0; i < len(lit); i++ {
		if !nameChar(lit[i]) {
			if lit[i] == '*' {
				return pattern{}, errs.New(codes.InvalidArgument, "%s %q: `*` may only end a pattern", what, clip(s))
			}
			return pattern{}, errs.New(codes.InvalidArgument, "%s %q: bad character %q; want [A-Za-z0-9_.@-] and a final *", what, clip(s), lit[i])
		}
	}
	return pattern{lit: strings.ToLower(lit), exact: !star}, nil
}

// match reports whether s matches, ignoring case. It does not allocate.
func (p *pattern) match(s string) bool {
	if len(s) < len(p.lit) || p.exact && len(s) != len(p.lit) {
		return false
	}
	return equalLower(s[:len(p.lit)], p.lit)
}

// matchLower is match for s in lower case already: the check's hot path.
func (p *pattern) matchLower(s string) bool {
	if len(s) < len(p.lit) || p.exact && len(s) != len(p.lit) {
		return false
	}
	return len(p.lit) == 0 || s[:len(p.lit)] == p.lit
}

// equalLower reports whether s equals lower, which is in lower case, ignoring
// the case of s's ASCII letters. len(s) == len(lower).
func equalLower(s, lower string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// lowerInto writes s in lower case into buf and returns it, without
// allocating when s fits.
func lowerInto(buf []byte, s string) []byte {
	buf = buf[:0]
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	return buf
}

func nameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '@' || c == '-'
}

// validName reports whether s is an owner, alias or principal:
// [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}.
func validName(s string) bool {
	if len(s) == 0 || len(s) > maxNameLen {
		return false
	}
	if c := s[0]; c == '_' || c == '.' || c == '@' || c == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameChar(s[i]) {
			return false
		}
	}
	return true
}

// callerPattern matches a caller (CallerPattern): `*` every caller,
// `group:name` the members of a group, anything else one principal
// (ignoring case).
type callerPattern struct {
	kind  callerKind
	lit   string // lower case: the principal or the group name
	group string // the group name as written
	bit   uint64 // the group's bit in its Policy; 0 if it has none
}

type callerKind uint8

const (
	callerAny callerKind = iota
	callerGroup
	callerExact
)

// GroupPrefix starts a CallerPattern that names a group: `group:premium`.
const GroupPrefix = "group:"

func compileCaller(s string) (callerPattern, error) {
	switch {
	case s == "*":
		return callerPattern{kind: callerAny}, nil
	case strings.HasPrefix(s, GroupPrefix):
		g := s[len(GroupPrefix):]
		if !validName(g) {
			return callerPattern{}, errs.New(codes.InvalidArgument, "CallerPattern %q: bad group name; want group:[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", clip(s))
		}
		return callerPattern{kind: callerGroup, lit: strings.ToLower(g), group: g}, nil
	case validName(s):
		return callerPattern{kind: callerExact, lit: strings.ToLower(s)}, nil
	case s == "":
		return callerPattern{}, errs.New(codes.InvalidArgument, "CallerPattern: empty; want *, group:NAME or a principal")
	}
	return callerPattern{}, errs.New(codes.InvalidArgument, "CallerPattern %q: want *, group:NAME or a principal ([A-Za-z0-9][A-Za-z0-9_.@-]{0,127})", clip(s))
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
