package client

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// The shapes the concerns share (Topics, ACL, Directory, Agents, Admin,
// Memory): what a call may leave out is a CallOption, a list that pages
// returns a Page, and a call that returns more than one value returns a
// struct naming them.

// Page is one page of a list that pages (Directory.List,
// Topics.DeadLetters): its Items, and Next, the cursor of the page after it
// ("" when this is the last). Pass After(p.Next) for the next page.
type Page[T any] struct {
	Items []T
	Next  string
}

// A CallOption adjusts one call: After and Limit page a list, IfRevision
// and IfETag make a write conditional, and the rest belong to one call
// (MaxAttempts, At, DryRun, InGroups). Each method says which options it
// takes; another is InvalidArgument, and nothing is sent. The options of
// Dial are Options.
type CallOption func(*callOptions)

// optKind is one kind of CallOption, a bit of callOptions.set.
type optKind uint16

const (
	optAfter optKind = 1 << iota
	optLimit
	optMaxAttempts
	optRevision
	optAt
	optDryRun
	optGroups
	optETag
)

var optNames = map[optKind]string{
	optAfter: "After", optLimit: "Limit", optMaxAttempts: "MaxAttempts", optRevision: "IfRevision",
	optAt: "At", optDryRun: "DryRun", optGroups: "InGroups", optETag: "IfETag",
}

type callOptions struct {
	set         optKind
	bad         string // why an option is invalid
	after       string
	limit       int
	maxAttempts int
	revision    int64
	at          int
	dryRun      bool
	groups      []string
	etag        string
}

// After starts a page after the cursor (a Page's Next); "" is the first
// page.
func After(cursor string) CallOption {
	return func(o *callOptions) { o.set |= optAfter; o.after = cursor }
}

// Limit bounds how many items a call returns (a page's, or a search's); 0
// is the call's default. Negative is InvalidArgument.
func Limit(n int) CallOption {
	return func(o *callOptions) {
		o.set |= optLimit
		if n < 0 {
			o.fail("limit %d is negative", n)
		}
		o.limit = n
	}
}

// MaxAttempts is how many times a subscription delivers a message before
// it becomes a dead letter (Topics.Subscribe, for a subscription it
// creates); 0 is the default, 5. Negative is InvalidArgument.
func MaxAttempts(n int) CallOption {
	return func(o *callOptions) {
		o.set |= optMaxAttempts
		if n < 0 {
			o.fail("max attempts %d is negative", n)
		}
		o.maxAttempts = n
	}
}

// IfRevision makes a change of the ACL conditional (compare-and-swap): it
// applies only if the ACL is still at revision (as ACL.Rules read it),
// else Aborted. 0, or no IfRevision, applies it to whatever is stored.
func IfRevision(revision int64) CallOption {
	return func(o *callOptions) { o.set |= optRevision; o.revision = revision }
}

// IfETag makes a write of an agent's state conditional: it applies only
// if the state is still the version of etag (as Agents.State read it),
// else Aborted. "", or no IfETag, applies it to whatever is stored.
func IfETag(etag string) CallOption {
	return func(o *callOptions) { o.set |= optETag; o.etag = etag }
}

// At is where ACL.AddRule inserts its rule: 1 for the first; 0, or no At,
// appends.
func At(position int) CallOption {
	return func(o *callOptions) {
		o.set |= optAt
		if position < 0 {
			o.fail("position %d is negative", position)
		}
		o.at = position
	}
}

// DryRun makes Admin.ApplyType only validate, storing nothing.
func DryRun() CallOption {
	return func(o *callOptions) { o.set |= optDryRun; o.dryRun = true }
}

// InGroups gives ACL.Check the caller's groups beside those of the ACL.
func InGroups(groups ...string) CallOption {
	return func(o *callOptions) { o.set |= optGroups; o.groups = append(o.groups, groups...) }
}

func (o *callOptions) fail(format string, args ...any) {
	if o.bad == "" {
		o.bad = fmt.Sprintf(format, args...)
	}
}

// callOpts applies opts for the call what, which takes the options of
// allowed: another is InvalidArgument.
func callOpts(what string, opts []CallOption, allowed optKind) (callOptions, error) {
	var o callOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if extra := o.set &^ allowed; extra != 0 {
		var names []string
		for k := optKind(1); k != 0 && k <= extra; k <<= 1 {
			if extra&k != 0 {
				names = append(names, optNames[k])
			}
		}
		return o, errs.New(codes.InvalidArgument, "%s takes no %s option: not sent", what, strings.Join(names, ", "))
	}
	if o.bad != "" {
		return o, errs.New(codes.InvalidArgument, "%s: %s: not sent", what, o.bad)
	}
	return o, nil
}
