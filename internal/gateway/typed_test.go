package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

type quoteIn struct {
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

type quoteOut struct {
	Price float64 `json:"price"`
}

// One typed skill declaration: the gateway refuses arguments that do not
// match its schema before the agent runs, in unary Asks and in sessions,
// and ListTypes carries its schemas.
func TestTypedSkill(t *testing.T) {
	e := startGateway(t, nil)
	var runs atomic.Int32
	skill := grain.TypedSkill[quoteIn, quoteOut]("quote", "Prices an order.", "shop")
	err := e.rt.Registry().Register("Shop", func(grain.Host) (grain.Agent, error) {
		h := grain.TypedHandler(func(_ context.Context, in quoteIn) (quoteOut, error) {
			runs.Add(1)
			return quoteOut{Price: 2.5 * float64(in.Qty)}, nil
		})
		return agentFunc(h), nil
	}, grain.TypeInfo{Skills: []grain.Skill{skill}})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(data string) (*agentsilov1.AgentMessage, error) {
		r, err := e.cli.Ask(t.Context(), &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{
			To: "Shop:s", MessageType: "quote", DataType: grain.JSONType, Data: []byte(data),
		}})
		return r.GetMessage(), err
	}
	r, err := ask(`{"item":"pen","qty":4}`)
	if err != nil || string(r.GetData()) != `{"price":10}` || r.GetDataType() != grain.JSONType {
		t.Fatalf("quote: %v, %v", r, err)
	}
	for _, bad := range []string{`{"item":"pen"}`, `{"item":"pen","qty":"4"}`, `{"item":"pen","qty":4,"coupon":"x"}`, `nope`} {
		if _, err := ask(bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "skill quote of Shop") {
			t.Errorf("quote %s: %v, want InvalidArgument from the schema", bad, err)
		}
	}
	// Through a session too.
	s := e.open(t, &agentsilov1.Hello{})
	res, _ := s.result(s.call(&agentsilov1.AgentMessage{To: "Shop:s", Kind: agentsilov1.Kind_KIND_REQUEST, MessageType: "quote", Data: []byte(`{"qty":1}`)}, 0))
	wantCode(t, res, codes.InvalidArgument)
	if n := runs.Load(); n != 1 {
		t.Fatalf("the agent ran %d times, want once (for the good arguments)", n)
	}

	// ListTypes: the schemas, as the registry has them.
	l, err := e.cli.ListTypes(t.Context(), &agentsilov1.ListTypesRequest{SkillTag: "shop"})
	if err != nil || len(l.GetTypes()) != 1 {
		t.Fatalf("ListTypes: %v, %v", l, err)
	}
	sk := l.GetTypes()[0].GetSkills()[0]
	if sk.GetInputSchema() != string(skill.InputSchema) || sk.GetOutputSchema() != string(skill.OutputSchema) || !json.Valid([]byte(sk.GetInputSchema())) {
		t.Fatalf("ListTypes skill %v; want the schemas %s, %s", sk, skill.InputSchema, skill.OutputSchema)
	}
}

// The secret values of an agent's configuration are read back only by
// who may Configure it (or administer the ACL); Read shows the rest.
func TestConfigSecrets(t *testing.T) {
	// bob and root may read alice's agents; root, in group admins,
	// administers the ACL.
	a := startAuthority(t, acl.Document{Rules: []acl.Rule{
		{OwnerPattern: "alice", AgentPattern: "*", CallerPattern: "bob", Permission: acl.Read},
		{OwnerPattern: "alice", AgentPattern: "*", CallerPattern: "root", Permission: acl.Read},
	}})
	e := startGateway(t, func(c *Config) {
		c.Auth.Keys = testKeys
		c.ACL = a
		c.Addr = ""
	})
	ctx := t.Context()
	alice, bob, root := withKey(ctx, "alice-key"), withKey(ctx, "bob-key"), withKey(ctx, "root-key")
	cfg := map[string]string{"url": "https://mcp.example.com/mcp", "api_key": "k", "header.X-Tenant": "acme", "OPENAI_API_KEY": "sk", "model": "small"}
	if _, err := e.cli.CreateAgent(alice, &agentsilov1.CreateAgentRequest{Address: "Echo:tools", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	get := func(who context.Context) map[string]string {
		t.Helper()
		r, err := e.cli.GetConfig(who, &agentsilov1.GetConfigRequest{Agent: "Echo:alice:tools"})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetConfig()
	}
	for name, who := range map[string]context.Context{"the owner": alice, "an operator": root} {
		if got := get(who); len(got) != len(cfg) || got["api_key"] != "k" || got["header.X-Tenant"] != "acme" || got["OPENAI_API_KEY"] != "sk" {
			t.Errorf("%s reads %v, want every value", name, got)
		}
	}
	got := get(bob)
	if got["url"] != cfg["url"] || got["model"] != "small" || got["api_key"] != grain.Redacted || got["header.X-Tenant"] != grain.Redacted || got["OPENAI_API_KEY"] != grain.Redacted {
		t.Errorf("a reader reads %v, want the secrets redacted", got)
	}
}
