package acl

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

func TestParsePermission(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Permission
		ok   bool
	}{
		{"Message", Message, true},
		{"Message,Read", Message | Read, true},
		{"message, read", Message | Read, true},
		{"Message, Read", Message | Read, true}, // .NET's [Flags] ToString
		{"Read|Configure", Read | Configure, true},
		{"All", All, true},
		{"Message,All", All, true},
		{"None", None, true},
		{"Admin", Admin, true},
		{"5", Message | Read, true},
		{"15", Message | Configure | Read | Admin, true},
		{"Approve", Approve, true},
		{"63", All, true},
		{"Audit", Audit, true},
		{"64", 0, false},
		{"", 0, false},
		{",", 0, false},
		{"Write", 0, false},
		{"Message,,Read", Message | Read, true},
	} {
		got, err := ParsePermission(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParsePermission(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
	for p := Permission(0); p <= All; p++ {
		back, err := ParsePermission(p.String())
		if err != nil || back != p {
			t.Errorf("ParsePermission(%q) = %v, %v; want %v", p.String(), back, err, p)
		}
	}
	if s := (Message | Read).String(); s != "Message,Read" {
		t.Errorf("String = %q", s)
	}
}

func TestPatterns(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		match         bool
	}{
		{"*", "anything", true},
		{"acme", "acme", true},
		{"acme", "ACME", true},
		{"ACME", "acme", true},
		{"acme", "acme2", false},
		{"acme", "acm", false},
		{"support-*", "support-42", true},
		{"Support-*", "SUPPORT-x", true},
		{"support-*", "support-", true},
		{"support-*", "support", false},
		{"support-*", "xsupport-1", false},
	} {
		p, err := compilePattern("AgentPattern", c.pattern)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		if got := p.match(c.name); got != c.match {
			t.Errorf("%q matches %q = %v, want %v", c.pattern, c.name, got, c.match)
		}
	}
	for _, bad := range []string{"", "a*b", "**", "a b", "a:b", "*a", strings.Repeat("a", 200)} {
		if _, err := compilePattern("OwnerPattern", bad); err == nil {
			t.Errorf("compilePattern(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "group:", "group:a b", "al*", "a:b", "-x"} {
		if _, err := compileCaller(bad); err == nil {
			t.Errorf("compileCaller(%q) accepted", bad)
		}
	}
}

// fabr is the ACL of the tests: the usual cases (shared system agents,
// a premium group reaching an owner's support agents, a named partner with
// read access, an explicit deny before a broader grant) in one document.
func fabr(t testing.TB) *Policy {
	t.Helper()
	d, err := ParseDocument([]byte(`{
	  "Rules": [
	    {"OwnerPattern": "acme", "AgentPattern": "secret", "CallerPattern": "*", "Permission": "None"},
	    {"OwnerPattern": "acme", "AgentPattern": "support-*", "CallerPattern": "group:premium", "Permission": "Message,Read"},
	    {"OwnerPattern": "acme", "AgentPattern": "*", "CallerPattern": "bob", "Permission": "Read"},
	    {"OwnerPattern": "team-*", "AgentPattern": "*", "CallerPattern": "group:staff", "Permission": "All"},
	    {"OwnerPattern": "system", "AgentPattern": "*", "CallerPattern": "*", "Permission": "Message,Read"},
	    {"OwnerPattern": "system", "AgentPattern": "acl", "CallerPattern": "carol", "Permission": "Admin"}
	  ],
	  "Groups": {"premium": ["alice", "Dave"]}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheck(t *testing.T) {
	p := fabr(t)
	for _, c := range []struct {
		name         string
		caller       Caller
		owner, alias string
		need         Permission
		allowed      bool
		reason       Reason
		position     int
	}{
		{"own agent, no rule scan", Caller{Principal: "acme"}, "acme", "secret", All, true, OwnAgent, 0},
		{"own agent is case-sensitive: another owner", Caller{Principal: "ACME"}, "acme", "secret", Message, false, RuleMatched, 1},
		{"explicit deny comes first", Caller{Principal: "alice"}, "acme", "secret", Message, false, RuleMatched, 1},
		{"group member from the ACL", Caller{Principal: "alice"}, "acme", "support-7", Message, true, RuleMatched, 2},
		{"group member, other case", Caller{Principal: "dave"}, "ACME", "Support-7", Read, true, RuleMatched, 2},
		{"group rule grants no Configure", Caller{Principal: "alice"}, "acme", "support-7", Configure, false, RuleMatched, 2},
		{"not in the group: next rule", Caller{Principal: "bob"}, "acme", "support-7", Read, true, RuleMatched, 3},
		{"first match wins even if it denies", Caller{Principal: "bob"}, "acme", "support-7", Message, false, RuleMatched, 3},
		{"group from credentials", Caller{Principal: "erin", Groups: []string{"Staff"}}, "team-red", "x", Configure, true, RuleMatched, 4},
		{"prefix owner not matched", Caller{Principal: "erin", Groups: []string{"staff"}}, "teamred", "x", Message, false, DefaultDeny, 0},
		{"shared system agents", Caller{Principal: "zed"}, "system", "weather", Message, true, RuleMatched, 5},
		{"system: no Configure", Caller{Principal: "zed"}, "system", "weather", Configure, false, RuleMatched, 5},
		{"several flags at once", Caller{Principal: "zed"}, "system", "weather", Message | Read, true, RuleMatched, 5},
		{"no rule matches", Caller{Principal: "alice"}, "bob", "private", Message, false, DefaultDeny, 0},
		{"system:acl matched by the broader rule first", Caller{Principal: "carol"}, "system", "acl", Admin, false, RuleMatched, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := p.Check(&c.caller, c.owner, c.alias, c.need)
			if d.Allowed != c.allowed || d.Reason != c.reason || d.Position != c.position {
				t.Fatalf("Check = %+v; want allowed %v, reason %v, position %d", d, c.allowed, c.reason, c.position)
			}
			if d.Reason == RuleMatched && d.Rule.ID != uint64(c.position) {
				t.Fatalf("matched rule id %d, want %d", d.Rule.ID, c.position)
			}
		})
	}
}

func TestSeedRuleOnlyWithoutRules(t *testing.T) {
	p, err := Compile(Document{Groups: map[string][]string{"admins": {"root"}}})
	if err != nil {
		t.Fatal(err)
	}
	alice := &Caller{Principal: "alice"}
	if d := p.Check(alice, "system", "weather", Message|Read); !d.Allowed || d.Reason != RuleMatched || d.Rule != SeedRule || d.Position != 0 {
		t.Fatalf("seed rule: %+v", d)
	}
	if d := p.Check(alice, "system", "weather", Configure); d.Allowed {
		t.Fatalf("seed rule grants Configure: %+v", d)
	}
	if d := p.Check(alice, "bob", "x", Message); d.Allowed || d.Reason != DefaultDeny {
		t.Fatalf("other owner without rules: %+v", d)
	}
	// One rule of its own: the seed no longer applies.
	p, err = Compile(Document{Rules: []Rule{{OwnerPattern: "bob", AgentPattern: "*", CallerPattern: "alice", Permission: Message}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Check(alice, "system", "weather", Message); d.Allowed || d.Reason != DefaultDeny {
		t.Fatalf("seed rule beside rules: %+v", d)
	}
}

func TestCheckAdmin(t *testing.T) {
	p, err := Compile(Document{
		Rules:  []Rule{{OwnerPattern: "system", AgentPattern: "acl", CallerPattern: "carol", Permission: Admin}},
		Groups: map[string][]string{"admins": {"root"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		caller Caller
		ok     bool
	}{
		{Caller{Principal: "carol"}, true},
		{Caller{Principal: "root"}, true},                           // ACL group admins
		{Caller{Principal: "op", Groups: []string{"admins"}}, true}, // API key's group
		{Caller{Principal: "system"}, true},                         // owns system:acl
		{Caller{Principal: "mallory"}, false},
	} {
		if d := p.CheckAdmin(&c.caller); d.Allowed != c.ok {
			t.Errorf("CheckAdmin(%+v) = %+v, want %v", c.caller, d, c.ok)
		}
	}
}

func TestParseDocument(t *testing.T) {
	// Wrapped in "Acl", as in a settings file with other sections; ids in order.
	d, err := ParseDocument([]byte(`{"Acl": {"Rules": [
		{"OwnerPattern": "system", "AgentPattern": "*", "CallerPattern": "*", "Permission": "Message, Read"},
		{"OwnerPattern": "a", "AgentPattern": "b*", "CallerPattern": "group:g", "Permission": 63}],
		"Groups": {"g": ["y", "x", "x"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Rules) != 2 || d.Rules[0].ID != 1 || d.Rules[1].ID != 2 || d.NextID != 3 || d.Rules[1].Permission != All {
		t.Fatalf("document %+v", d)
	}
	if g := d.Groups["g"]; len(g) != 2 || g[0] != "x" || g[1] != "y" {
		t.Fatalf("group g = %v", g)
	}
	for _, bad := range []string{
		`{"Rules": [{"OwnerPattern": "", "AgentPattern": "*", "CallerPattern": "*", "Permission": "All"}]}`,
		`{"Rules": [{"OwnerPattern": "a", "AgentPattern": "*", "CallerPattern": "*", "Permission": "Write"}]}`,
		`{"Rules": [{"OwnerPattern": "a", "AgentPattern": "*", "CallerPattern": "x y", "Permission": "All"}]}`,
		`{"Groups": {"bad name": ["x"]}}`,
		`{"Groups": {"g": ["bad member"]}}`,
		`[`,
	} {
		if _, err := ParseDocument([]byte(bad)); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("ParseDocument(%s) = %v, want InvalidArgument", bad, err)
		}
	}
}

func TestParseRule(t *testing.T) {
	r, err := ParseRule("system:* -> * -> Message,Read")
	if err != nil || r != SeedRule {
		t.Fatalf("ParseRule = %+v, %v", r, err)
	}
	if r.String() != "system:* -> * -> Message,Read" {
		t.Fatalf("String = %q", r.String())
	}
	for _, bad := range []string{"a:b -> c", "ab -> c -> Read", "a:b -> c -> Write", "a:b -> x y -> Read", "a*b:* -> c -> Read"} {
		if _, err := ParseRule(bad); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("ParseRule(%q) = %v, want InvalidArgument", bad, err)
		}
	}
}

// Configuration errors are InvalidArgument.
func TestConfigErrorsAreInvalidArgument(t *testing.T) {
	if _, err := NewAuthority(Config{}); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("NewAuthority without a Store = %v, want InvalidArgument", err)
	}
	seed := Document{Rules: []Rule{{OwnerPattern: "a", AgentPattern: "*", CallerPattern: "", Permission: All}}}
	if _, err := NewAuthority(Config{Store: NewMemStore(), Seed: &seed}); errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "rule 1") {
		t.Errorf("NewAuthority with a bad seed = %v, want InvalidArgument naming rule 1", err)
	}
	if _, err := Compile(seed); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("Compile of a bad document = %v, want InvalidArgument", err)
	}
}

// Check allocates nothing, for the own agent and for others.
func TestCheckAllocs(t *testing.T) {
	p := fabr(t)
	alice := &Caller{Principal: "Alice", Groups: []string{"x"}}
	for _, c := range []struct{ owner, alias string }{{"Alice", "a"}, {"acme", "support-1"}, {"system", "w"}, {"nobody", "x"}} {
		if n := testing.AllocsPerRun(100, func() { p.Check(alice, c.owner, c.alias, Message) }); n != 0 {
			t.Errorf("Check on %s:%s: %v allocations", c.owner, c.alias, n)
		}
	}
}

func FuzzParsePermission(f *testing.F) {
	for _, s := range []string{"Message", "Message,Read", "All", "None", "message, read", "5", "15", "16", "", ",", "Read|Admin", "Write"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePermission(s)
		if err != nil {
			return
		}
		if p&^All != 0 {
			t.Fatalf("ParsePermission(%q) = %d, beyond All", s, p)
		}
		back, err := ParsePermission(p.String())
		if err != nil || back != p {
			t.Fatalf("round trip of %q: %q -> %v, %v", s, p.String(), back, err)
		}
	})
}

func FuzzPatterns(f *testing.F) {
	for _, s := range [][2]string{{"*", "x"}, {"acme", "ACME"}, {"support-*", "support-1"}, {"a*b", "ab"}, {"group:premium", "alice"}, {"", ""}, {"**", "x"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pat, name string) {
		p, err := compilePattern("AgentPattern", pat)
		if err == nil {
			lit, star := strings.CutSuffix(pat, "*")
			if strings.Contains(lit, "*") {
				t.Fatalf("compilePattern(%q) accepted an inner *", pat)
			}
			// A pattern matches its own literal, in any case, and a name
			// matches iff the rule says so.
			if !p.match(lit+strings.Repeat("x", boolInt(star))) && lit != "" {
				t.Fatalf("%q does not match its own literal", pat)
			}
			want := strings.EqualFold(name, lit) || star && len(name) >= len(lit) && strings.EqualFold(name[:len(lit)], lit)
			if got := p.match(name); got != want {
				t.Fatalf("%q matches %q = %v, want %v", pat, name, got, want)
			}
		}
		if _, err := compileCaller(pat); err == nil && pat != "*" && !strings.HasPrefix(pat, GroupPrefix) && !validName(pat) {
			t.Fatalf("compileCaller(%q) accepted", pat)
		}
		if r, err := ParseRule(pat + ":" + name + " -> * -> All"); err == nil {
			if back, err := ParseRule(r.String()); err != nil || back != r {
				t.Fatalf("rule round trip %q: %+v, %v", r.String(), back, err)
			}
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rules1000 is a large ACL: 900 rules for named owners (owner-0 ...), 99 for
// owner prefixes, and at the end a rule for owner-target that the checks
// below hit, so that every rule ahead of it is in its way.
func rules1000(kind string) Document {
	var d Document
	for i := 0; i < 999; i++ {
		r := Rule{OwnerPattern: fmt.Sprintf("owner-%d", i), AgentPattern: fmt.Sprintf("agent-%d*", i), CallerPattern: fmt.Sprintf("user-%d", i), Permission: Message}
		switch {
		case kind == "wildcard-owners":
			r.OwnerPattern = "*"
		case kind == "match-any":
			r.OwnerPattern, r.AgentPattern = "*", "*"
		case i%10 == 9:
			r.OwnerPattern = fmt.Sprintf("team-%d*", i)
		}
		if i%3 == 0 {
			r.CallerPattern = fmt.Sprintf("group:g%d", i%16)
		}
		d.Rules = append(d.Rules, r)
	}
	d.Rules = append(d.Rules, Rule{OwnerPattern: "owner-target", AgentPattern: "ticket-*", CallerPattern: "group:premium", Permission: Message | Read})
	d.Groups = map[string][]string{"premium": {"alice"}}
	return d
}

func BenchmarkCheckOwnAgent(b *testing.B) {
	p, err := Compile(rules1000("typical"))
	if err != nil {
		b.Fatal(err)
	}
	c := &Caller{Principal: "alice"}
	b.ReportAllocs()
	for b.Loop() {
		if !p.Check(c, "alice", "ticket-1", Message).Allowed {
			b.Fatal("denied")
		}
	}
}

// BenchmarkCheckCrossOwner1000: a check of another owner's agent against
// 1,000 rules, matched by the last one. "typical": rules mostly for named
// owners, some for owner prefixes; "wildcard-owners": every owner pattern
// is `*` (the agent patterns differ); "match-any": the worst case, every
// rule is `*:*` for another caller, so each is tried in turn.
func BenchmarkCheckCrossOwner1000(b *testing.B) {
	for _, kind := range []string{"typical", "wildcard-owners", "match-any"} {
		b.Run(kind, func(b *testing.B) {
			p, err := Compile(rules1000(kind))
			if err != nil {
				b.Fatal(err)
			}
			c := &Caller{Principal: "Alice"}
			b.ReportAllocs()
			for b.Loop() {
				if d := p.Check(c, "owner-target", "ticket-1", Message); !d.Allowed || d.Position != 1000 {
					b.Fatalf("decision %+v", d)
				}
			}
		})
	}
}

// A context's agent (alias ".ctx" and 16 hex digits after its agent's)
// has its agent's rights, and no other's.
func TestCheckContextAlias(t *testing.T) {
	p, err := Compile(Document{Rules: []Rule{{OwnerPattern: "bob", AgentPattern: "main", CallerPattern: "alice", Permission: Message}}})
	if err != nil {
		t.Fatal(err)
	}
	alice := &Caller{Principal: "alice"}
	for alias, want := range map[string]bool{
		"main":                          true,
		"main.ctx0123456789abcdef":      true,
		"other.ctx0123456789abcdef":     false,
		"main.ctx0123456789abcdefx":     false,
		"main.ctx0123456789ABCDEF":      false,
		"mainctx0123456789abcdef":       false,
		"main.ctx0123456789abcdef.ctx0": false,
	} {
		if d := p.Check(alice, "bob", alias, Message); d.Allowed != want {
			t.Errorf("alice on bob's %s: %+v, want allowed %v", alias, d, want)
		}
	}
}
