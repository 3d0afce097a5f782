package acl

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Rule grants Permission to the callers matching CallerPattern on the agents
// whose owner matches OwnerPattern and whose alias matches AgentPattern.
// Its JSON has OwnerPattern, AgentPattern, CallerPattern and Permission
// (such as "Message,Read"), plus the Id agentsilo gives it.
type Rule struct {
	// ID names the rule for update and removal; the store assigns it.
	ID            uint64     `json:"Id,omitempty"`
	OwnerPattern  string     `json:"OwnerPattern"`
	AgentPattern  string     `json:"AgentPattern"`
	CallerPattern string     `json:"CallerPattern"`
	Permission    Permission `json:"Permission"`
}

// String returns the rule as `owner:agent -> caller -> permission`.
func (r Rule) String() string {
	return r.OwnerPattern + ":" + r.AgentPattern + " -> " + r.CallerPattern + " -> " + r.Permission.String()
}

// Validate reports the first bad pattern of r.
func (r Rule) Validate() error {
	if _, err := compilePattern("OwnerPattern", r.OwnerPattern); err != nil {
		return err
	}
	if _, err := compilePattern("AgentPattern", r.AgentPattern); err != nil {
		return err
	}
	if _, err := compileCaller(r.CallerPattern); err != nil {
		return err
	}
	if r.Permission&^All != 0 {
		return errs.New(codes.InvalidArgument, "permission %d: want flags within All (15)", r.Permission)
	}
	return nil
}

// SeedRule is what applies while no rules are set: every caller may message
// and read the shared agents of owner "system".
var SeedRule = Rule{OwnerPattern: "system", AgentPattern: "*", CallerPattern: "*", Permission: Message | Read}

// Document is a cluster's whole ACL: the rules in order and the groups. Its
// JSON is that of an ACL file ({"Rules": [...], "Groups": {"premium":
// ["alice"]}}), plus the next rule id.
type Document struct {
	Rules  []Rule              `json:"Rules"`
	Groups map[string][]string `json:"Groups,omitempty"`
	// NextID is the id the next added rule gets.
	NextID uint64 `json:"NextId,omitempty"`
}

// Clone returns a deep copy of d.
func (d Document) Clone() Document {
	c := Document{Rules: slices.Clone(d.Rules), NextID: d.NextID}
	if d.Groups != nil {
		c.Groups = make(map[string][]string, len(d.Groups))
		for k, v := range d.Groups {
			c.Groups[k] = slices.Clone(v)
		}
	}
	return c
}

// Validate reports the first bad rule, group name or member of d, and rule
// ids that repeat.
func (d Document) Validate() error {
	ids := make(map[uint64]bool, len(d.Rules))
	for i, r := range d.Rules {
		if err := r.Validate(); err != nil {
			return errs.Wrap(codes.InvalidArgument, err, "rule %d", i+1)
		}
		if r.ID != 0 {
			if ids[r.ID] {
				return errs.New(codes.InvalidArgument, "rule %d: id %d repeats", i+1, r.ID)
			}
			ids[r.ID] = true
		}
	}
	for _, g := range slices.Sorted(maps.Keys(d.Groups)) {
		if !validName(g) {
			return errs.New(codes.InvalidArgument, "group %q: bad name; want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", clip(g))
		}
		for _, m := range d.Groups[g] {
			if !validName(m) {
				return errs.New(codes.InvalidArgument, "group %s: bad member %q; want a principal", g, clip(m))
			}
		}
	}
	return nil
}

// normalize gives every rule without an id one, and sorts and dedups group
// members.
func (d *Document) normalize() {
	for _, r := range d.Rules {
		d.NextID = max(d.NextID, r.ID+1)
	}
	d.NextID = max(d.NextID, 1)
	for i := range d.Rules {
		if d.Rules[i].ID == 0 {
			d.Rules[i].ID = d.NextID
			d.NextID++
		}
	}
	for g, ms := range d.Groups {
		sort.Strings(ms)
		d.Groups[g] = slices.Compact(ms)
	}
}

// ParseDocument reads an ACL file: its JSON ({"Rules": [...], "Groups":
// {...}}), either alone ({"Rules": ..., "Groups": ...}) or inside an object under "Acl".
// Rules get ids 1, 2, ... in order.
func ParseDocument(b []byte) (Document, error) {
	var wrapper struct {
		Acl *Document `json:"Acl"`
	}
	var d Document
	if err := json.Unmarshal(b, &wrapper); err == nil && wrapper.Acl != nil {
		d = *wrapper.Acl
	} else {
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&d); err != nil {
			return Document{}, errs.Wrap(codes.InvalidArgument, err, "acl")
		}
	}
	if err := d.Validate(); err != nil {
		return Document{}, errs.Wrap(codes.InvalidArgument, err, "acl")
	}
	d.normalize()
	return d, nil
}

// ParseRule parses the short form `owner:agent -> caller -> permission`
// (the form Rule.String writes and the docs use).
func ParseRule(s string) (Rule, error) {
	parts := strings.Split(s, "->")
	if len(parts) != 3 {
		return Rule{}, errs.New(codes.InvalidArgument, "rule %q: want owner:agent -> caller -> permission", clip(s))
	}
	owner, agent, ok := strings.Cut(strings.TrimSpace(parts[0]), ":")
	if !ok {
		return Rule{}, errs.New(codes.InvalidArgument, "rule %q: want owner:agent before the first ->", clip(s))
	}
	p, err := ParsePermission(parts[2])
	if err != nil {
		return Rule{}, err
	}
	r := Rule{OwnerPattern: owner, AgentPattern: agent, CallerPattern: strings.TrimSpace(parts[1]), Permission: p}
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}
