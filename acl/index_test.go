package acl

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// naiveCheck is the evaluation of DESIGN.md, rule by rule, with no index:
// what Policy.Check must agree with.
func naiveCheck(d Document, c *Caller, owner, alias string, need Permission) Decision {
	if owner == c.Principal {
		return Decision{Allowed: true, Reason: OwnAgent, Granted: All}
	}
	rules, seeded := d.Rules, false
	if len(rules) == 0 {
		rules, seeded = []Rule{SeedRule}, true
	}
	inGroup := func(g string) bool {
		for _, x := range c.Groups {
			if strings.EqualFold(x, g) {
				return true
			}
		}
		for name, ms := range d.Groups {
			if strings.EqualFold(name, g) {
				for _, m := range ms {
					if strings.EqualFold(m, c.Principal) {
						return true
					}
				}
			}
		}
		return false
	}
	match := func(pat, s string) bool {
		if lit, ok := strings.CutSuffix(pat, "*"); ok {
			return len(s) >= len(lit) && strings.EqualFold(s[:len(lit)], lit)
		}
		return strings.EqualFold(pat, s)
	}
	for i, r := range rules {
		callerOK := r.CallerPattern == "*" ||
			strings.HasPrefix(r.CallerPattern, GroupPrefix) && inGroup(r.CallerPattern[len(GroupPrefix):]) ||
			!strings.HasPrefix(r.CallerPattern, GroupPrefix) && strings.EqualFold(r.CallerPattern, c.Principal)
		if match(r.OwnerPattern, owner) && match(r.AgentPattern, alias) && callerOK {
			dec := Decision{Allowed: r.Permission.Has(need), Reason: RuleMatched, Rule: r, Position: i + 1, Granted: r.Permission}
			if seeded {
				dec.Position = 0
			}
			return dec
		}
	}
	return Decision{Reason: DefaultDeny}
}

// The indexes of a Policy change nothing: on random documents (owner,
// agent and caller patterns of every kind, more groups than a check
// merges lists for, and more than have bits) Check agrees with naiveCheck.
func TestIndexAgreesWithNaiveEvaluation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "ab", "abc", "B", "bob", "Bo", "c", "system", "x1"}
	pick := func() string { return names[rng.IntN(len(names))] }
	pattern := func() string {
		switch rng.IntN(4) {
		case 0:
			return "*"
		case 1:
			return pick()[:1] + "*"
		case 2:
			return strings.ToUpper(pick())
		}
		return pick()
	}
	for doc := 0; doc < 300; doc++ {
		var d Document
		d.Groups = map[string][]string{}
		ngroups := 1 + rng.IntN(80)
		for g := 0; g < ngroups; g++ {
			d.Groups["g"+string(rune('a'+g%26))+strings.Repeat("x", g/26)] = []string{pick(), pick()}
		}
		for range rng.IntN(60) {
			r := Rule{OwnerPattern: pattern(), AgentPattern: pattern(), Permission: Permission(rng.IntN(16))}
			switch rng.IntN(3) {
			case 0:
				r.CallerPattern = "*"
			case 1:
				g := rng.IntN(ngroups + 2)
				r.CallerPattern = GroupPrefix + "g" + string(rune('a'+g%26)) + strings.Repeat("x", g/26)
			default:
				r.CallerPattern = pick()
			}
			d.Rules = append(d.Rules, r)
		}
		d.normalize()
		p, err := Compile(d)
		if err != nil {
			t.Fatal(err)
		}
		for range 50 {
			c := &Caller{Principal: pick()}
			for range rng.IntN(12) {
				g := rng.IntN(ngroups + 2)
				c.Groups = append(c.Groups, "G"+string(rune('a'+g%26))+strings.Repeat("x", g/26))
			}
			owner, alias, need := pick(), pick(), Permission(1+rng.IntN(15))
			got, want := p.Check(c, owner, alias, need), naiveCheck(d, c, owner, alias, need)
			if got != want {
				t.Fatalf("document %d, caller %+v, %s:%s, %v: Check = %+v, naive %+v\nrules: %v\ngroups: %v", doc, c, owner, alias, need, got, want, d.Rules, d.Groups)
			}
		}
	}
}
