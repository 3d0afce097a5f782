package cluster_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
)

// Greeter answers every message with a greeting.
type Greeter struct{}

func (Greeter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	r := m.Response()
	r.Message = "hello, " + m.Message
	return r, nil
}

// A program of one's own agent types: cluster.Main parses the flags of
// `silo` (--etcd, --gateway-addr, --mcp-addr, ...) and the SILO_* environment,
// runs the silo until SIGTERM or SIGINT and exits.
func ExampleMain() {
	reg := grain.NewRegistry()
	err := reg.Register("Greeter", func(h grain.Host) (grain.Agent, error) { return Greeter{}, nil },
		grain.TypeInfo{
			Description: "Greets whoever writes to it.",
			Skills:      []grain.Skill{{Name: "greet", Description: "Greet someone by name."}},
		})
	if err != nil {
		log.Fatal(err)
	}
	cluster.Main(reg)
}

// A silo's settings: DefaultSiloConfig is one silo on this machine,
// reachable on loopback only, with an embedded etcd in ./data; each
// default is explained where DefaultSiloConfig sets it. Change what you
// need, as `silo`'s flags do.
func ExampleDefaultSiloConfig() {
	cfg := cluster.DefaultSiloConfig()
	cfg.GatewayAddr = "127.0.0.1:0"             // --gateway-addr: a free port
	cfg.Runtime.IdleTimeout = 5 * time.Minute   // --idle-timeout
	cfg.Gateway.Auth.KeyFile = "/etc/keys.json" // --auth-file
	fmt.Println(cfg.Runtime.MailboxSize, cfg.Runtime.AskTimeout, cfg.ShutdownTimeout, cfg.Etcd.DataDir)
	// Output: 1000 30s 30s ./data
}

// A silo in a program that runs it itself (cluster.Main does all of this,
// with flags and signals): NewSilo checks the configuration, Start joins
// the cluster and serves, Err reports a failure while serving, Close shuts
// down gracefully.
func ExampleNewSilo() {
	ctx := context.Background()
	reg := grain.NewRegistry()
	if err := reg.Register("Greeter", func(grain.Host) (grain.Agent, error) { return Greeter{}, nil }); err != nil {
		log.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Etcd.DataDir = "/var/lib/agentsilo"
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on %s", s.GatewayAddr())
	select {
	case err := <-s.Err():
		log.Print(err)
	case <-ctx.Done():
	}
	if err := s.Close(ctx); err != nil {
		log.Print(err)
	}
}
