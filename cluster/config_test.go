package cluster

import (
	"bytes"
	"flag"
	"reflect"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/mcp"
	"github.com/agentsilo/agentsilo/topics"
)

// TestDefaultSiloConfigMatchesParts: DefaultSiloConfig writes each default
// out (to explain it), and each is the default of the part that takes it,
// so the two cannot drift apart.
func TestDefaultSiloConfigMatchesParts(t *testing.T) {
	cfg := DefaultSiloConfig()
	cfg.Logger = testLogger()
	sub, err := newSubConfigs(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := grain.DefaultConfig()
	g.Silo, g.Logger = cfg.Name, cfg.Logger
	if r := sub.runtime; r.MailboxSize != g.MailboxSize || r.AskTimeout != g.AskTimeout || r.IdleTimeout != g.IdleTimeout ||
		r.DeactivateTimeout != g.DeactivateTimeout || r.MaxMessageSize != g.MaxMessageSize ||
		r.IdempotencyWindow != g.IdempotencyWindow || r.IdempotencyKeys != g.IdempotencyKeys || r.Silo != g.Silo {
		t.Errorf("runtime: %+v, grain.DefaultConfig: %+v", r, g)
	}
	gw := gateway.DefaultConfig()
	if c := sub.gateway; c.SessionBacklog != gw.SessionBacklog || c.SessionBacklogAge != gw.SessionBacklogAge ||
		c.Limits != gw.Limits || c.MaxMessageSize != gw.MaxMessageSize || c.Addr != gw.Addr {
		t.Errorf("gateway: %+v, gateway.DefaultConfig: %+v", c, gw)
	}
	tc := topics.DefaultConfig()
	if !reflect.DeepEqual(sub.topics, tc) {
		t.Errorf("topics: %+v, topics.DefaultConfig: %+v", sub.topics, tc)
	}
	if d := a2a.DefaultConfig(); cfg.A2A.LeaseTTL != d.LeaseTTL || cfg.A2A.TaskTimeout != d.TaskTimeout || cfg.A2A.TaskRetention != d.TaskRetention {
		t.Errorf("A2A: %+v, a2a.DefaultConfig: %+v", cfg.A2A, d)
	}
	if d := mcp.DefaultConfig(); cfg.MCP.CallTimeout != d.CallTimeout || cfg.MCP.SessionTimeout != d.SessionTimeout || cfg.MCP.MaxSessions != d.MaxSessions {
		t.Errorf("MCP: %+v, mcp.DefaultConfig: %+v", cfg.MCP, d)
	}
}

// TestSubConfigs: the parts take the user's settings, and the silo's name,
// address and authentication where the user gives none.
func TestSubConfigs(t *testing.T) {
	cfg := DefaultSiloConfig()
	cfg.Name, cfg.GatewayAddr, cfg.Logger = "s1", "127.0.0.1:0", testLogger()
	cfg.Runtime.MaxMessageSize = 1 << 20
	cfg.Gateway.Auth.KeyFile = "keys.json"
	cfg.Topics.MaxBacklog = 7
	cfg.LeaseTTL = 5e9
	cfg.A2A.Addr, cfg.MCP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	sub, err := newSubConfigs(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case sub.runtime.Silo != "s1" || sub.gateway.Silo != "s1" || sub.a2a.Silo != "s1" || sub.mcp.Silo != "s1":
		t.Errorf("silo names: %q %q %q %q", sub.runtime.Silo, sub.gateway.Silo, sub.a2a.Silo, sub.mcp.Silo)
	case sub.gateway.Addr != "127.0.0.1:0" || sub.gateway.MaxMessageSize != 1<<20:
		t.Errorf("gateway: addr %q, max message %d", sub.gateway.Addr, sub.gateway.MaxMessageSize)
	case sub.a2a.Auth.KeyFile != "keys.json" || sub.mcp.Auth.KeyFile != "keys.json":
		t.Errorf("A2A and MCP do not take the gateway's authentication: %+v, %+v", sub.a2a.Auth, sub.mcp.Auth)
	case sub.a2a.LeaseTTL != cfg.LeaseTTL:
		t.Errorf("A2A lease %v, want the membership's %v", sub.a2a.LeaseTTL, cfg.LeaseTTL)
	case sub.topics.MaxBacklog != 7:
		t.Errorf("topics backlog %d", sub.topics.MaxBacklog)
	case sub.a2a.Version != Version() || sub.mcp.Version != Version():
		t.Errorf("versions %q, %q", sub.a2a.Version, sub.mcp.Version)
	}
}

// TestTestFlags: `silo --help` lists --fault-injection only in a build with
// the test hooks (the agentsilo_testhooks tag); cmd/silo's
// TestProductionHasNoTestHooks checks the production binary.
func TestTestFlags(t *testing.T) {
	var out bytes.Buffer
	p := Program{Name: "silo", Registry: newTestRegistry(t)}
	if code := p.Run([]string{"--help"}, &out, &out); code != 0 {
		t.Fatalf("--help: exit %d\n%s", code, out.String())
	}
	if got := strings.Contains(out.String(), "-fault-injection"); got != testHooksBuilt {
		t.Errorf("--help lists --fault-injection: %v, built with the test hooks: %v\n%s", got, testHooksBuilt, out.String())
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	cfg := DefaultSiloConfig()
	testFlags(fs, &cfg)
	if testHooksBuilt {
		if err := fs.Parse([]string{"--fault-injection"}); err != nil || !cfg.faultInjection {
			t.Errorf("--fault-injection: %v, on: %v", err, cfg.faultInjection)
		}
	}
}
