package acl

import (
	"math/bits"
	"strings"
	"time"
	"unsafe"

	"github.com/agentsilo/agentsilo/internal/names"
)

// Caller is who makes a call: the principal the gateway authenticated and
// the groups its credentials name (an API key's groups, a token's groups
// claim). The ACL's own groups are added by the Policy.
type Caller struct {
	Principal string
	Groups    []string
	// Scoped says the caller proved itself with a bearer token from an
	// OpenID provider, whose Scopes bound what it may call: a skill that
	// requires scopes (grain.Skill.Scopes) takes such a caller only if
	// Scopes holds them all. A caller proven otherwise (an API key, a
	// client certificate) is the principal itself, bounded by the ACL
	// alone.
	Scoped bool
	// Scopes are the token's scopes (its "scope" or "scp" claim).
	Scopes []string
	// Expires, if not zero, is when the caller's proof ends (a token's
	// expiry, with the leeway): a gateway session opened with it ends
	// then, and the client attaches it again with fresh credentials.
	Expires time.Time
}

// MissingScope returns the first of required that c lacks, or "" if c has
// them all or is not Scoped.
func (c *Caller) MissingScope(required []string) string {
	if !c.Scoped {
		return ""
	}
	for _, r := range required {
		found := false
		for _, s := range c.Scopes {
			if s == r {
				found = true
				break
			}
		}
		if !found {
			return r
		}
	}
	return ""
}

// Reason says why a Decision came out as it did.
type Reason uint8

const (
	// DefaultDeny: no rule matched.
	DefaultDeny Reason = iota
	// OwnAgent: the caller owns the agent; every permission, no rule scan.
	OwnAgent
	// RuleMatched: the first rule that matched decided.
	RuleMatched
)

func (r Reason) String() string {
	switch r {
	case OwnAgent:
		return "own agent"
	case RuleMatched:
		return "rule"
	}
	return "default deny"
}

// Decision is the outcome of a check, with its explanation.
type Decision struct {
	Allowed bool
	Reason  Reason
	// Rule is the rule that matched (Reason RuleMatched), and Position its
	// 1-based place in the list; Position is 0 for SeedRule, which applies
	// while no rules are set.
	Rule     Rule
	Position int
	// Granted is what the caller holds on the agent: All for its own
	// agent, the matched rule's permission, or None.
	Granted Permission
}

// Policy is a compiled Document: what checks run against. It is immutable
// and safe for concurrent use.
type Policy struct {
	doc   Document
	rules []compiled
	// The rules are indexed so that a check tries only those that can
	// match: byOwner lists, per lower-case owner, the rules whose
	// OwnerPattern is exactly that owner; byOwner0 the other rules whose
	// owner prefix starts with a byte, byAgent0 those whose owner is `*`
	// and agent pattern starts with a byte; of the rules that match any
	// owner and alias, restByCaller lists those for one (lower-case)
	// principal, restByGroup those for a group with a bit (restGroups all
	// of these, restGroupMask their bits), and rest the others. Each list
	// is in rule order, and a check merges the ones that apply, so the
	// first match is still the first.
	byOwner       map[string][]int32
	byOwner0      [256][]int32
	byAgent0      [256][]int32
	restByCaller  map[string][]int32
	restByGroup   [64][]int32
	restGroups    []int32
	restGroupMask uint64
	rest          []int32
	// groups maps a lower-case group name to its lower-case members.
	groups map[string]map[string]struct{}
	// The first 64 group names (of the ACL and of the rules) have a bit
	// each: groupBit maps a lower-case name to it, memberOf a lower-case
	// principal to the bits of its ACL groups. A check computes the
	// caller's bits once, at the first group rule it tries.
	groupBit map[string]uint64
	memberOf map[string]uint64
	seeded   bool
}

type compiled struct {
	owner, agent pattern
	caller       callerPattern
	perm         Permission
}

// Compile checks d and compiles it. While d has no rules, SeedRule applies.
func Compile(d Document) (*Policy, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	d = d.Clone()
	p := &Policy{doc: d, byOwner: make(map[string][]int32), restByCaller: make(map[string][]int32), groups: make(map[string]map[string]struct{}, len(d.Groups)),
		groupBit: make(map[string]uint64), memberOf: make(map[string]uint64)}
	bit := func(lg string) uint64 {
		b, ok := p.groupBit[lg]
		if !ok && len(p.groupBit) < 64 {
			b = 1 << len(p.groupBit)
			p.groupBit[lg] = b
		}
		return b
	}
	rules := d.Rules
	if len(rules) == 0 {
		rules = []Rule{SeedRule}
		p.seeded = true
	}
	p.rules = make([]compiled, len(rules))
	for i, r := range rules {
		c := &p.rules[i]
		c.owner, _ = compilePattern("OwnerPattern", r.OwnerPattern)
		c.agent, _ = compilePattern("AgentPattern", r.AgentPattern)
		c.caller, _ = compileCaller(r.CallerPattern)
		c.perm = r.Permission
		if c.caller.kind == callerGroup {
			c.caller.bit = bit(c.caller.lit)
		}
		switch {
		case c.owner.exact:
			p.byOwner[c.owner.lit] = append(p.byOwner[c.owner.lit], int32(i))
		case c.owner.lit != "":
			p.byOwner0[c.owner.lit[0]] = append(p.byOwner0[c.owner.lit[0]], int32(i))
		case c.agent.lit != "":
			p.byAgent0[c.agent.lit[0]] = append(p.byAgent0[c.agent.lit[0]], int32(i))
		case c.caller.kind == callerExact:
			p.restByCaller[c.caller.lit] = append(p.restByCaller[c.caller.lit], int32(i))
		case c.caller.bit != 0:
			j := bits.TrailingZeros64(c.caller.bit)
			p.restByGroup[j] = append(p.restByGroup[j], int32(i))
			p.restGroups = append(p.restGroups, int32(i))
			p.restGroupMask |= c.caller.bit
		default:
			p.rest = append(p.rest, int32(i))
		}
	}
	for g, ms := range d.Groups {
		set := make(map[string]struct{}, len(ms))
		for _, m := range ms {
			set[strings.ToLower(m)] = struct{}{}
		}
		lg := strings.ToLower(g)
		if old := p.groups[lg]; old != nil {
			for m := range old {
				set[m] = struct{}{}
			}
		}
		p.groups[lg] = set
		if b := bit(lg); b != 0 {
			for m := range set {
				p.memberOf[m] |= b
			}
		}
	}
	return p, nil
}

// Document returns a copy of the document p was compiled from.
func (p *Policy) Document() Document { return p.doc.Clone() }

// Seeded reports whether p has no rules of its own, so SeedRule applies.
func (p *Policy) Seeded() bool { return p.seeded }

// Check decides whether c holds need on the agent of owner and alias (an
// address's parts; the type plays no part). The own agent is allowed
// without a rule scan; otherwise the first matching rule decides, and with
// none the answer is no. Check does not allocate.
func (p *Policy) Check(c *Caller, owner, alias string, need Permission) Decision {
	if owner == c.Principal {
		return Decision{Allowed: true, Reason: OwnAgent, Granted: All}
	}
	// A context's agent (grain.ContextAddress) has its agent's rights.
	alias = names.BaseAlias(alias)
	var ownerBuf, aliasBuf, callerBuf [maxNameLen]byte
	lowOwner, lowAlias, principal := lower(ownerBuf[:], owner), lower(aliasBuf[:], alias), lower(callerBuf[:], c.Principal)
	var mask uint64 // the caller's group bits, once maskDone
	maskDone := false
	// The candidate lists that apply, the empty ones left out: those of
	// the owner, of the alias, of the caller, and of the caller's groups
	// (up to maxGroupLists of them; past that, the rules of every group).
	const maxGroupLists = 8
	var all [5 + maxGroupLists][]int32
	n := 0
	for j, l := range [5][]int32{p.byOwner[lowOwner], p.byOwner0[first(lowOwner)], p.byAgent0[first(lowAlias)], p.restByCaller[principal], p.rest} {
		if len(l) > 0 && (j != 1 || lowOwner != "") && (j != 2 || lowAlias != "") {
			all[n] = l
			n++
		}
	}
	if p.restGroupMask != 0 {
		mask, maskDone = p.groupMask(c, principal), true
		if m := mask & p.restGroupMask; bits.OnesCount64(m) <= maxGroupLists {
			for ; m != 0; m &= m - 1 {
				all[n] = p.restByGroup[bits.TrailingZeros64(m)]
				n++
			}
		} else {
			all[n] = p.restGroups
			n++
		}
	}
	lists := all[:n]
	for {
		// The next candidate is the lowest head of the lists.
		k := -1
		for j := range lists {
			if len(lists[j]) > 0 && (k < 0 || lists[j][0] < lists[k][0]) {
				k = j
			}
		}
		if k < 0 {
			break
		}
		i := lists[k][0]
		lists[k] = lists[k][1:]
		r := &p.rules[i]
		if !r.owner.matchLower(lowOwner) || !r.agent.matchLower(lowAlias) {
			continue
		}
		switch r.caller.kind {
		case callerExact:
			if r.caller.lit != principal {
				continue
			}
		case callerGroup:
			if r.caller.bit == 0 {
				if !p.inGroup(r.caller.lit, c, principal) {
					continue
				}
				break
			}
			if !maskDone {
				mask, maskDone = p.groupMask(c, principal), true
			}
			if mask&r.caller.bit == 0 {
				continue
			}
		}
		d := Decision{Allowed: r.perm.Has(need), Reason: RuleMatched, Granted: r.perm}
		if p.seeded {
			d.Rule = SeedRule
		} else {
			d.Rule = p.doc.Rules[i]
			d.Position = int(i) + 1
		}
		return d
	}
	return Decision{Reason: DefaultDeny}
}

// first returns the first byte of s, 0 if s is empty.
func first(s string) byte {
	if s == "" {
		return 0
	}
	return s[0]
}

// lower returns s in lower case, in buf if it fits (without allocating).
// The result aliases buf: it must not outlive the check that owns buf.
func lower(buf []byte, s string) string {
	if len(s) > len(buf) {
		return strings.ToLower(s)
	}
	if len(s) == 0 {
		return ""
	}
	b := lowerInto(buf, s)
	return unsafe.String(&b[0], len(b))
}

// groupMask returns the bits of the groups c (whose principal in lower
// case is lower) belongs to.
func (p *Policy) groupMask(c *Caller, lower string) uint64 {
	m := p.memberOf[lower]
	for _, g := range c.Groups {
		var buf [maxNameLen]byte
		m |= p.groupBit[string(lowerInto(buf[:], g))]
	}
	return m
}

// inGroup reports whether c belongs to the group named lg (lower case):
// through its credentials' groups or the ACL's.
func (p *Policy) inGroup(lg string, c *Caller, lower string) bool {
	for _, g := range c.Groups {
		if len(g) == len(lg) && equalLower(g, lg) {
			return true
		}
	}
	_, ok := p.groups[lg][lower]
	return ok
}

// InGroup reports whether c belongs to group (ignoring case), through its
// credentials or the ACL's groups.
func (p *Policy) InGroup(c *Caller, group string) bool {
	return p.inGroup(strings.ToLower(group), c, strings.ToLower(c.Principal))
}

// AdminsGroup is the group whose members always hold Admin on AdminOwner's
// AdminAgent, the pseudo-agent `system:acl` that stands for the ACL itself.
const (
	AdminsGroup = "admins"
	AdminOwner  = "system"
	AdminAgent  = "acl"
	// AuditAgent is the pseudo-agent `system:audit` that stands for the
	// audit log: Audit on it allows reading the log.
	AuditAgent = "audit"
)

// CheckAdmin decides whether c may change rules and groups: Admin on
// system:acl, or membership of group admins.
func (p *Policy) CheckAdmin(c *Caller) Decision {
	d := p.Check(c, AdminOwner, AdminAgent, Admin)
	if !d.Allowed && p.InGroup(c, AdminsGroup) {
		return Decision{Allowed: true, Reason: d.Reason, Rule: d.Rule, Position: d.Position, Granted: d.Granted | Admin}
	}
	return d
}
