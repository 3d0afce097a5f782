package grain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

func TestRegistry(t *testing.T) {
	reg := NewRegistry()
	for _, bad := range []string{"", "1x", "Session", "a b"} {
		if err := reg.Register(bad, echoFactory); !errors.Is(err, errs.ErrInvalidArgument) {
			t.Errorf("Register(%q) = %v", bad, err)
		}
	}
	if err := reg.Register("Echo", echoFactory); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("Echo", echoFactory); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("duplicate Register = %v", err)
	}
	for _, bad := range [][]TypeInfo{
		{{Name: "Other"}},
		{{MailboxSize: -1}},
		{{IdleTimeout: -time.Second}},
		{{Skills: []Skill{{Description: "no name"}}}},
		{{Skills: []Skill{{Name: "a"}, {Name: "a"}}}},
		{{Skills: []Skill{{Name: "a", Tags: []string{" "}}}}},
		{{}, {}},
	} {
		if err := reg.Register("Bad", echoFactory, bad...); !errors.Is(err, errs.ErrInvalidArgument) {
			t.Errorf("Register with %+v = %v, want InvalidArgument", bad, err)
		}
	}
	if _, ok := reg.Lookup("Bad"); ok {
		t.Fatal("a refused type was registered")
	}
}

// Types returns every type's metadata, by name, as copies.
func TestRegistryTypes(t *testing.T) {
	reg := NewRegistry()
	planner := TypeInfo{
		Description: "Plans trips.",
		Skills: []Skill{
			{Name: "plan", Description: "Plans a trip.", Tags: []string{"travel", "Planning"}, Examples: []string{"plan a trip to Rome"}},
			{Name: "book", Tags: []string{"travel"}},
		},
		MailboxSize: 10,
		IdleTimeout: time.Minute,
	}
	for name, info := range map[string][]TypeInfo{"Planner": {planner}, "Echo": nil, "Zed": {{Name: "Zed", Description: "last"}}} {
		if err := reg.Register(name, echoFactory, info...); err != nil {
			t.Fatal(err)
		}
	}
	planner.Skills[0].Tags[0] = "changed after Register"
	types := reg.Types()
	var names []string
	for _, ti := range types {
		names = append(names, ti.Name)
	}
	if fmt.Sprint(names) != "[Echo Planner Zed]" || fmt.Sprint(reg.Names()) != "[Echo Planner Zed]" {
		t.Fatalf("Types %v, Names %v; want [Echo Planner Zed]", names, reg.Names())
	}
	p := types[1]
	if p.Description != "Plans trips." || len(p.Skills) != 2 || p.Skills[0].Tags[0] != "travel" || p.Skills[0].Examples[0] != "plan a trip to Rome" || p.MailboxSize != 10 || p.IdleTimeout != time.Minute {
		t.Fatalf("Planner = %+v", p)
	}
	if !p.HasTag("planning") || p.HasTag("cooking") || types[0].HasTag("travel") {
		t.Fatal("HasTag")
	}
	p.Skills[0].Name = "changed by a caller"
	if info, ok := reg.Info("Planner"); !ok || info.Skills[0].Name != "plan" {
		t.Fatalf("Info = %+v, %v: a caller changed the registry", info, ok)
	}
	if types[2].Description != "last" {
		t.Fatalf("Zed = %+v", types[2])
	}
}

// An unknown type's NotFound names the known types, at most ten of them.
func TestUnknownTypeNamesTheKnown(t *testing.T) {
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{"Echo": echoFactory, "Counter": echoFactory})
	_, err := ask(t, rt, "Nope:a:b", "x")
	wantCode(t, err, codes.NotFound, `agent type "Nope" is not registered; known types: Counter, Echo`)
	if _, err := rt.CreateAgent(t.Context(), "a", "Nope:b", nil); !strings.Contains(fmt.Sprint(err), "known types: Counter, Echo") {
		t.Fatalf("CreateAgent = %v", err)
	}

	reg := NewRegistry()
	for i := range 13 {
		if err := reg.Register(fmt.Sprintf("T%02d", i), echoFactory); err != nil {
			t.Fatal(err)
		}
	}
	err = reg.unknown("Nope")
	want := `agent type "Nope" is not registered; known types: T00, T01, T02, T03, T04, T05, T06, T07, T08, T09 …and 3 more (` + "`client types`" + ` lists them)`
	if err.Error() != want || errs.Code(err) != codes.NotFound {
		t.Fatalf("unknown = %q,\nwant %q", err, want)
	}
	if err := NewRegistry().unknown("Nope"); !strings.Contains(err.Error(), "no agent types are registered") {
		t.Fatalf("unknown on an empty registry = %q", err)
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for i := 0; i < 1000; i++ {
		id := NewID()
		if len(id) != 36 || id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("bad UUIDv7 %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
		if id[:13] < prev {
			t.Fatalf("ids not time-ordered: %q after %q", id, prev)
		}
		prev = id[:13]
	}
	// A request's id and its reply's, made together, are ids like the
	// others, and differ.
	for i := 0; i < 1000; i++ {
		a, b := newIDPair(time.Now().UnixNano())
		for _, id := range []string{a, b} {
			if len(id) != 36 || id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) || strings.Count(id, "-") != 4 {
				t.Fatalf("bad UUIDv7 %q", id)
			}
			if seen[id] {
				t.Fatalf("duplicate id %q", id)
			}
			seen[id] = true
		}
	}
}

// Replace registers a type or replaces one it registered, never one that
// Register registered; Remove removes what Replace registered. New
// activations take the new factory, one already running keeps its agent
// until it is deactivated, and a removed type is NotFound once its
// activation has ended.
func TestRegistryReplace(t *testing.T) {
	reg := NewRegistry()
	if err := reg.Register("Code", echoFactory); err != nil {
		t.Fatal(err)
	}
	if err := reg.Replace("Code", echoFactory); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Replace of a type Register registered = %v, want FailedPrecondition", err)
	}
	if err := reg.Remove("Code"); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Remove of a type Register registered = %v, want FailedPrecondition", err)
	}
	if err := reg.Remove("Nope"); errs.Code(err) != codes.NotFound {
		t.Fatalf("Remove of an unregistered type = %v, want NotFound", err)
	}
	if err := reg.Replace("1x", echoFactory); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("Replace of a bad name = %v, want InvalidArgument", err)
	}
	says := func(text string) Factory {
		return func(Host) (Agent, error) {
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) { return reply(m, text) }}, nil
		}
	}
	if err := reg.Replace("Decl", says("v1"), TypeInfo{Description: "first"}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("Decl", echoFactory); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("Register over a replaceable type = %v, want InvalidArgument", err)
	}
	if !reg.Replaceable("Decl") || reg.Replaceable("Code") || reg.Replaceable("Nope") {
		t.Fatalf("Replaceable: Decl %v, Code %v, Nope %v", reg.Replaceable("Decl"), reg.Replaceable("Code"), reg.Replaceable("Nope"))
	}
	rt := startRuntime(t, DefaultConfig(), reg)
	if r, err := ask(t, rt, "Decl:a", "x"); err != nil || r.Message != "v1" {
		t.Fatalf("Decl:a = %v, %v; want v1", r, err)
	}

	typed := TypedSkill[struct {
		N int `json:"n"`
	}, any]("add", "adds n")
	if err := reg.Replace("Decl", says("v2"), TypeInfo{Description: "second", Skills: []Skill{typed}}); err != nil {
		t.Fatal(err)
	}
	if ti, _ := reg.Info("Decl"); ti.Description != "second" {
		t.Fatalf("Info after Replace: %+v", ti)
	}
	if r, err := ask(t, rt, "Decl:a", "x"); err != nil || r.Message != "v1" {
		t.Fatalf("Decl:a, active before the replacement = %v, %v; want v1 until deactivated", r, err)
	}
	if r, err := ask(t, rt, "Decl:b", "x"); err != nil || r.Message != "v2" {
		t.Fatalf("Decl:b, activated after the replacement = %v, %v; want v2", r, err)
	}
	if err := reg.ValidateInput("Decl", "add", []byte(`{"n": "one"}`)); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("the replacement's input schema is not in force: %v", err)
	}

	if err := reg.Remove("Decl"); err != nil {
		t.Fatal(err)
	}
	if err := reg.ValidateInput("Decl", "add", []byte(`{"n": "one"}`)); err != nil {
		t.Fatalf("the removed type's input schema is still in force: %v", err)
	}
	for _, alias := range []string{"a", "b"} {
		if _, err := rt.Deactivate(t.Context(), Address{Type: "Decl", Owner: "tester", Alias: alias}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := ask(t, rt, "Decl:a", "x")
	wantCode(t, err, codes.NotFound, `agent type "Decl" is not registered`)
	if names := reg.Names(); len(names) != 1 || names[0] != "Code" {
		t.Fatalf("Names after Remove = %v", names)
	}
}
