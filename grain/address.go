package grain

import (
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/names"
)

// SystemOwner owns the shared agents of a cluster.
const SystemOwner = "system"

// SessionType is the reserved agent type of client sessions: a session's
// address is `Session:<principal>:<id>`, and agents send to it to push messages
// to the client. It cannot be registered.
const SessionType = "Session"

// Address names an agent: `Type:owner:alias`.
type Address struct {
	Type  string
	Owner string
	Alias string
}

// String returns the canonical form `Type:owner:alias`.
func (a Address) String() string { return a.Type + ":" + a.Owner + ":" + a.Alias }

// Handle returns `owner:alias`.
func (a Address) Handle() string { return a.Owner + ":" + a.Alias }

// IsZero reports whether a is the zero Address.
func (a Address) IsZero() bool { return a == Address{} }

// ParseAddress parses a canonical address `Type:owner:alias`. A relative
// address (one colon) is an error here; see Resolve.
func ParseAddress(s string) (Address, error) {
	return parse(s, "")
}

// Resolve parses s, which is either canonical (`Type:owner:alias`) or relative
// (`Type:alias`, whose owner is owner). The error is InvalidArgument and names
// the bad part.
func Resolve(s, owner string) (Address, error) {
	return parse(s, owner)
}

func parse(s, owner string) (Address, error) {
	first := strings.IndexByte(s, ':')
	if first < 0 {
		return Address{}, errs.New(codes.InvalidArgument, "address %q: want Type:owner:alias or Type:alias", clip(s))
	}
	typ, rest := s[:first], s[first+1:]
	var a Address
	if second := strings.IndexByte(rest, ':'); second >= 0 {
		a = Address{Type: typ, Owner: rest[:second], Alias: rest[second+1:]}
		if strings.IndexByte(a.Alias, ':') >= 0 {
			return Address{}, errs.New(codes.InvalidArgument, "address %q: too many colons; want Type:owner:alias", clip(s))
		}
	} else {
		if owner == "" {
			return Address{}, errs.New(codes.InvalidArgument, "address %q: relative address (Type:alias) needs a sender with an owner; want Type:owner:alias", clip(s))
		}
		a = Address{Type: typ, Owner: owner, Alias: rest}
	}
	if !ValidType(a.Type) {
		return Address{}, errs.New(codes.InvalidArgument, "address %q: bad type %q: want [A-Za-z][A-Za-z0-9_.-]{0,63}", clip(s), clip(a.Type))
	}
	if !names.Valid(a.Owner) {
		return Address{}, errs.New(codes.InvalidArgument, "address %q: bad owner %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", clip(s), clip(a.Owner))
	}
	if !names.Valid(a.Alias) {
		return Address{}, errs.New(codes.InvalidArgument, "address %q: bad alias %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", clip(s), clip(a.Alias))
	}
	return a, nil
}

// ValidType reports whether s is a well-formed agent type name:
// [A-Za-z][A-Za-z0-9_.-]{0,63}. It is names.ValidType (internal/names, the
// one grammar of names).
func ValidType(s string) bool { return names.ValidType(s) }

// ValidName reports whether s is a well-formed owner or alias:
// [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}. It is names.Valid (internal/names,
// the one grammar of names, which packages that check a principal use
// without importing grain).
func ValidName(s string) bool { return names.Valid(s) }

// clip keeps error messages short when a client sends a huge address.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
