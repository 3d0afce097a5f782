package cluster

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

// declaredSilo starts a silo on the etcd e under prefix, reading its
// flags as `silo` does, with the types reg holds.
func declaredSilo(t *testing.T, e *etcdtest.Server, prefix, name string, reg *grain.Registry, args ...string) *Silo {
	t.Helper()
	cfg, _, _, err := Program{Name: "silo"}.parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = name
	cfg.GatewayAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
	cfg.PeerAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: prefix}
	cfg.Logger = testLogger()
	s, err := NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("%s: start: %v", name, err)
	}
	return s
}

func closeSilo(t *testing.T, s *Silo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("close %s: %v", s.cfg.Name, err)
	}
}

func dialSilo(t *testing.T, s *Silo, principal string) *client.Client {
	t.Helper()
	cl, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithPrincipal(principal))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// helperDef is a definition of the type Helper on the fake model srv.
func helperDef(srv *fakemodel.Server, prompt string) []byte {
	return fmt.Appendf(nil, `type: Helper
description: Answers questions about orders.
model:
  provider: openai
  base_url: %s
  name: fake-1
system_prompt: %s
`, srv.OpenAIURL(), prompt)
}

// TestDeclaredTypes: a definition applied through one silo's gateway is
// served by both silos when ApplyType returns, listed and marked
// declared, found in the directory, and answers with the model's text; a
// replacement reaches the next activation; a bad definition, a name of a
// type in code (on the other silo) and a caller without Admin are
// refused; a dry run stores nothing; a deleted type is NotFound
// everywhere and leaves the directory.
func TestDeclaredTypes(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	e := etcdtest.Start(t)
	defer e.Stop()
	srv := fakemodel.NewFunc(func(r fakemodel.Request) fakemodel.Step {
		return fakemodel.Step{Text: r.System + " / " + r.LastMessage().Text}
	})
	defer srv.Close()

	withEcho := grain.NewRegistry()
	if err := withEcho.Register("Echo", func(grain.Host) (grain.Agent, error) {
		return agentFunc(func(_ context.Context, m *grain.Message) (*grain.Message, error) { return m.Response(), nil }), nil
	}); err != nil {
		t.Fatal(err)
	}
	s0 := declaredSilo(t, e, "/declared/", "s0", grain.NewRegistry(), "--llm-allow-private-networks")
	defer closeSilo(t, s0)
	s1 := declaredSilo(t, e, "/declared/", "s1", withEcho, "--llm-allow-private-networks")
	defer closeSilo(t, s1)
	waitFor(t, "two members", func() bool {
		return len(s0.router.state.Load().view.Members) == 2 && len(s1.router.state.Load().view.Members) == 2
	})

	admin := dialSilo(t, s0, "system")
	defer admin.Close()
	alice := dialSilo(t, s1, "alice")
	defer alice.Close()
	ctx := t.Context()

	// Refused: a definition that does not validate, names a type in code
	// (on s1 only), or comes from a caller without Admin on system:types.
	_, err := admin.Admin().ApplyType(ctx, []byte("type: Helper\nmodel: {name: m}\n"))
	if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "model.provider") {
		t.Fatalf("a definition without a provider: %v; want InvalidArgument naming model.provider", err)
	}
	echo := strings.Replace(string(helperDef(srv, "p")), "type: Helper", "type: Echo", 1)
	if _, err := admin.Admin().ApplyType(ctx, []byte(echo)); errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "s1") {
		t.Fatalf("a declared type named like s1's Echo: %v; want FailedPrecondition naming s1", err)
	}
	if _, err := alice.Admin().ApplyType(ctx, helperDef(srv, "p")); errs.Code(err) != codes.PermissionDenied {
		t.Fatalf("ApplyType by alice: %v; want PermissionDenied", err)
	}

	// A dry run stores nothing.
	a, err := admin.Admin().ApplyType(ctx, helperDef(srv, "one"), client.DryRun())
	if err != nil || !a.Created || a.Type.Revision != 0 || !strings.Contains(a.Type.Definition, `"system_prompt":"one"`) {
		t.Fatalf("dry run: %+v, %v", a, err)
	}
	if l, err := admin.Admin().DeclaredTypes(ctx); err != nil || len(l) != 0 {
		t.Fatalf("declared types after a dry run: %v, %v; want none", l, err)
	}
	if _, ok := s1.reg.Info("Helper"); ok {
		t.Fatal("a dry run registered the type")
	}

	a, err = admin.Admin().ApplyType(ctx, helperDef(srv, "one"))
	if err != nil || !a.Created || a.Unchanged || len(a.Unconfirmed) != 0 || a.Type.Revision == 0 {
		t.Fatalf("apply: %+v, %v", a, err)
	}
	for _, s := range []*Silo{s0, s1} {
		if ti, ok := s.reg.Info("Helper"); !ok || ti.Description != "Answers questions about orders." {
			t.Fatalf("%s serves Helper? %v %+v (ApplyType returned, confirmed by every silo)", s.cfg.Name, ok, ti)
		}
	}
	types, err := alice.Admin().Types(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var listed *client.AgentType
	for i := range types {
		if types[i].Name == "Helper" {
			listed = &types[i]
		}
		if types[i].Name == "Echo" && types[i].Declared {
			t.Error("Echo, registered in code, is listed as declared")
		}
	}
	if listed == nil || !listed.Declared || listed.Description != "Answers questions about orders." {
		t.Fatalf("Types lists Helper as %+v", listed)
	}
	r, err := alice.Ask(ctx, "Helper:a", &client.Message{Message: "where is order 7?"})
	if err != nil || r.Message != "one / where is order 7?" {
		t.Fatalf("ask Helper:a: %v, %v", r, err)
	}
	waitFor(t, "Helper in the directory", func() bool {
		hits, err := alice.Directory().Search(ctx, "questions about orders", client.DirectoryQuery{Kind: grain.KindType})
		return err == nil && len(hits) > 0 && hits[0].Entry.Name == "Helper"
	})

	if a, err := admin.Admin().ApplyType(ctx, helperDef(srv, "one")); err != nil || !a.Unchanged {
		t.Fatalf("apply again: %+v, %v; want unchanged", a, err)
	}
	if a, err := admin.Admin().ApplyType(ctx, helperDef(srv, "two")); err != nil || a.Created || a.Unchanged {
		t.Fatalf("replace: %+v, %v", a, err)
	}
	waitFor(t, "Helper's activations of the first definition ended", func() bool {
		return len(s0.rt.Activations("Helper"))+len(s1.rt.Activations("Helper")) == 0
	})
	if r, err := alice.Ask(ctx, "Helper:a", &client.Message{Message: "and now?"}); err != nil || r.Message != "two / and now?" {
		t.Fatalf("ask Helper:a after the replacement: %v, %v; want the new system prompt", r, err)
	}

	if _, err := admin.Admin().DeleteType(ctx, "Echo"); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("delete Echo, in code: %v; want FailedPrecondition", err)
	}
	if unconfirmed, err := admin.Admin().DeleteType(ctx, "Helper"); err != nil || len(unconfirmed) != 0 {
		t.Fatalf("delete: %v, %v", unconfirmed, err)
	}
	for _, s := range []*Silo{s0, s1} {
		if _, ok := s.reg.Info("Helper"); ok {
			t.Fatalf("%s still serves Helper after DeleteType returned", s.cfg.Name)
		}
	}
	waitFor(t, "Helper's activations ended", func() bool {
		return len(s0.rt.Activations("Helper"))+len(s1.rt.Activations("Helper")) == 0
	})
	if _, err := alice.Ask(ctx, "Helper:a", &client.Message{Message: "still there?"}); errs.Code(err) != codes.NotFound {
		t.Fatalf("ask a deleted type: %v; want NotFound", err)
	}
	if _, err := admin.Admin().DeleteType(ctx, "Helper"); errs.Code(err) != codes.NotFound {
		t.Fatalf("delete again: %v; want NotFound", err)
	}
	waitFor(t, "Helper gone from the directory", func() bool {
		lPage, err := alice.Directory().List(ctx, client.DirectoryQuery{Kind: grain.KindType})
		l := lPage.Items
		if err != nil {
			return false
		}
		for _, e := range l {
			if e.Name == "Helper" {
				return false
			}
		}
		return true
	})
}

// TestLLMAllowPrivateNetworksFlag: a declared type's model on loopback is
// reached only with --llm-allow-private-networks, read as `silo` reads
// its flags; the A2A and MCP types' flags do not lift the guard, and the
// refusal is PermissionDenied naming the flag.
func TestLLMAllowPrivateNetworksFlag(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	e := etcdtest.Start(t)
	defer e.Stop()
	srv := fakemodel.NewFunc(func(fakemodel.Request) fakemodel.Step { return fakemodel.Step{Text: "hello from the model"} })
	defer srv.Close()
	for i, c := range []struct {
		args  []string
		allow bool
	}{
		{[]string{"--a2a-allow-private-networks", "--mcp-allow-private-networks"}, false},
		{[]string{"--llm-allow-private-networks"}, true},
	} {
		name := "flags " + strings.Join(c.args, " ")
		s := declaredSilo(t, e, fmt.Sprintf("/llmguard%d/", i), "llmguard", grain.NewRegistry(), c.args...)
		if s.cfg.LLM.AllowPrivateNetworks != c.allow {
			t.Errorf("%s: LLM.AllowPrivateNetworks %v", name, s.cfg.LLM.AllowPrivateNetworks)
		}
		cl := dialSilo(t, s, "system")
		if _, err := cl.Admin().ApplyType(t.Context(), helperDef(srv, "p")); err != nil {
			t.Errorf("%s: apply: %v", name, err)
		}
		r, err := cl.Ask(t.Context(), "Helper:a", &client.Message{Message: "hi"})
		switch {
		case c.allow && (err != nil || r.Message != "hello from the model"):
			t.Errorf("%s: a model on loopback: %v, %v; want its answer", name, r, err)
		case !c.allow && (errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--llm-allow-private-networks")):
			t.Errorf("%s: a model on loopback: %v; want PermissionDenied naming --llm-allow-private-networks", name, err)
		}
		cl.Close()
		closeSilo(t, s)
	}
}
