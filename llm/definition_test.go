package llm

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

const helperYAML = `
type: Helper
description: Answers questions about orders.
model:
  provider: openai
  base_url: https://api.openai.com/v1
  name: gpt-5.4-mini
  api_key_env: OPENAI_API_KEY
system_prompt: You help customers with their orders.
tools:
  - agent: Orders
  - directory: true
  - memory: true
approval: [Orders_cancel]
limits:
  max_rounds: 6
  max_output_tokens: 4000
  timeout: 2m
schedule:
  - every: 1h
    message: check the open orders
`

func TestParseDefinition(t *testing.T) {
	d, err := ParseDefinition([]byte(helperYAML))
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != "Helper" || d.Model.Provider != ProviderOpenAI || d.Model.APIKeyEnv != "OPENAI_API_KEY" || len(d.Tools) != 3 ||
		d.Tools[0].Agent != "Orders" || !d.Tools[1].Directory || !d.Tools[2].Memory || d.Limits.MaxRounds != 6 ||
		time.Duration(d.Limits.Timeout) != 2*time.Minute || len(d.Schedule) != 1 || time.Duration(d.Schedule[0].Every) != time.Hour {
		t.Fatalf("parsed %+v", d)
	}
	// A cron entry with a zone, an owner and a budget.
	d, err = ParseDefinition([]byte(helperYAML + `  - cron: "0 7 * * 1-5 Europe/Rome"
    message: summarise yesterday
    owner: acme
    alias: morning
`))
	if err != nil || len(d.Schedule) != 2 || d.Schedule[1].Cron != "0 7 * * 1-5 Europe/Rome" || d.Schedule[1].Owner != "acme" || d.Schedule[1].Alias != "morning" {
		t.Fatalf("a cron entry: %+v, %v", d.Schedule, err)
	}
	// The same in JSON.
	j := `{"type":"Helper","model":{"provider":"anthropic","name":"claude-x","api_key_env":"ANTHROPIC_API_KEY"},"limits":{"timeout":"90s","owner_daily_tokens":5000}}`
	d, err = ParseDefinition([]byte(j))
	if err != nil || d.Model.Provider != ProviderAnthropic || time.Duration(d.Limits.Timeout) != 90*time.Second || d.Limits.OwnerDailyTokens != 5000 {
		t.Fatalf("JSON: %+v, %v", d, err)
	}
}

// Bad definitions are refused with InvalidArgument naming the field (MCP
// and A2A tools with Unimplemented, until they are).
func TestDefinitionRefused(t *testing.T) {
	base := "type: H\nmodel: {provider: openai, name: m}\n"
	for _, tc := range []struct {
		yaml, field string
		code        codes.Code
	}{
		{"type: 'bad type'\nmodel: {provider: openai, name: m}", "type", codes.InvalidArgument},
		{"type: H\nmodel: {provider: cohere, name: m}", "model.provider", codes.InvalidArgument},
		{"type: H\nmodel: {name: m}", "model.provider", codes.InvalidArgument},
		{"type: H\nmodel: {provider: openai}", "model.name", codes.InvalidArgument},
		{"type: H\nmodel: {provider: openai, name: m, base_url: ftp://x}", "model.base_url", codes.InvalidArgument},
		{"type: H\nmodel: {provider: openai, name: m, api_key_env: sk-abc123}", "model.api_key_env", codes.InvalidArgument},
		{"type: H\nmodel: {provider: openai, name: m, api_key: sk-abc}", "unknown field \"api_key\"", codes.InvalidArgument},
		{base + "colour: red", "unknown field \"colour\"", codes.InvalidArgument},
		{base + "tools: [{}]", "tools[0]", codes.InvalidArgument},
		{base + "tools: [{agent: A, memory: true}]", "tools[0]", codes.InvalidArgument},
		{base + "tools: [{agent: 'no such'}]", "tools[0].agent", codes.InvalidArgument},
		{base + "tools: [{memory: true}, {memory: true}]", "tools[1]", codes.InvalidArgument},
		{base + "tools: [{agent: A, extra: 1}]", "unknown field \"extra\"", codes.InvalidArgument},
		{base + "approval: ['cancel order']", "approval[0]", codes.InvalidArgument},
		{base + "scopes: ['orders:read', 'two words']", "scopes[1]", codes.InvalidArgument},
		{base + "limits: {max_rounds: -1}", "limits.max_rounds", codes.InvalidArgument},
		{base + "limits: {max_rounds: 1000}", "limits.max_rounds", codes.InvalidArgument},
		{base + "limits: {max_output_tokens: -5}", "limits.max_output_tokens", codes.InvalidArgument},
		{base + "limits: {timeout: soon}", "limits.timeout", codes.InvalidArgument},
		{base + "limits: {timeout: 90}", "limits.timeout", codes.InvalidArgument},
		{base + "limits: {timeout: 48h}", "limits.timeout", codes.InvalidArgument},
		{base + "limits: {max_rounds: two}", "limits.max_rounds", codes.InvalidArgument},
		{base + "schedule: [{every: 10s, message: hi}]", "schedule[0].every", codes.InvalidArgument},
		{base + "schedule: [{every: 1h}]", "schedule[0].message", codes.InvalidArgument},
		{base + "schedule: [{message: hi}]", "schedule[0]: give exactly one of every", codes.InvalidArgument},
		{base + "schedule: [{every: 1h, cron: '0 7 * * *', message: hi}]", "schedule[0]: give exactly one of every", codes.InvalidArgument},
		{base + "schedule: [{every: 1h, message: hi}, {cron: '0 25 * * *', message: hi}]", "schedule[1].cron: hour field", codes.InvalidArgument},
		{base + "schedule: [{cron: '0 7 * * 1-5 Europe/Atlantis', message: hi}]", "schedule[0].cron: time zone", codes.InvalidArgument},
		{base + "schedule: [{cron: '0 7 * *', message: hi}]", "schedule[0].cron", codes.InvalidArgument},
		{base + "schedule: [{cron: '0 7 * * *', message: hi, owner: 'a b'}]", "schedule[0].owner", codes.InvalidArgument},
		{base + "schedule: [{cron: '0 7 * * *', message: hi, alias: '-x'}]", "schedule[0].alias", codes.InvalidArgument},
		{base + "schedule: [{cron: '0 7 * * *', message: hi}, {cron: '0 7 * * *', message: hi, alias: scheduled}]", "schedule[1]: repeats schedule[0]", codes.InvalidArgument},
		{base + "limits: {owner_daily_tokens: -1}", "limits.owner_daily_tokens", codes.InvalidArgument},
		{"- a\n- b", "definition", codes.InvalidArgument},
		{"{", "definition", codes.InvalidArgument},
	} {
		_, err := ParseDefinition([]byte(tc.yaml))
		if errs.Code(err) != tc.code || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: %v (code %v), want %v naming %s", tc.yaml, err, errs.Code(err), tc.code, tc.field)
		}
	}
}

// FuzzDefinition: any input either parses into a definition that
// validates and encodes back to one that parses the same, or is refused
// with InvalidArgument (or Unimplemented); never a panic.
func FuzzDefinition(f *testing.F) {
	f.Add([]byte(helperYAML))
	f.Add([]byte(`{"type":"A","model":{"provider":"anthropic","name":"m"},"tools":[{"agent":"B"}],"limits":{"timeout":"1m"}}`))
	f.Add([]byte("type: H\nmodel: {provider: openai, name: m}\ntools: [{mcp: x}]"))
	f.Add([]byte("type: H\nmodel: {provider: openai, name: m}\nlimits: {timeout: -1s}"))
	f.Add([]byte("type: H\nmodel: {provider: openai, name: m}\nschedule: [{cron: '*/5 1-3 * * 0,6 Europe/Rome', message: m, owner: o}]"))
	f.Add([]byte("null"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDefinition(data)
		if err != nil {
			if c := errs.Code(err); c != codes.InvalidArgument && c != codes.Unimplemented {
				t.Fatalf("%q: %v (code %v)", data, err, c)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("parsed but does not validate: %v", err)
		}
		b, err := jsonMarshal(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := ParseDefinition(b)
		if err != nil {
			t.Fatalf("%s does not parse again: %v", b, err)
		}
		b2, _ := jsonMarshal(d2)
		if string(b) != string(b2) {
			t.Fatalf("round trip: %s != %s", b, b2)
		}
	})
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// TestDefinitionScopes: a definition's scopes are required by every skill
// of its type.
func TestDefinitionScopes(t *testing.T) {
	d, err := ParseDefinition([]byte(helperYAML + "scopes: [orders:read]\n"))
	if err != nil || len(d.Scopes) != 1 {
		t.Fatalf("%+v, %v", d.Scopes, err)
	}
	t.Setenv("OPENAI_API_KEY", "unused")
	reg := grain.NewRegistry()
	if err := Register(reg, d); err != nil {
		t.Fatal(err)
	}
	for _, sk := range []string{SkillAsk, SkillConversation, SkillApprovals, SkillDecide} {
		if got := reg.RequiredScopes("Helper", sk); len(got) != 1 || got[0] != "orders:read" {
			t.Errorf("skill %s: scopes %v", sk, got)
		}
	}
}
