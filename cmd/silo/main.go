// Command silo runs one agentsilo silo: the grain runtime and the client
// gateway, in a cluster with the silos that share its etcd. It is
// cluster.Program with one flag of its own: --demo registers the demo agent
// types of package internal/demoagents and calls them once the silo serves
// (--examples registers them without the calls). Without either, the silo
// serves no agent types: build your own silo program with cluster.Main.
//
//	silo --demo                           # gateway on 127.0.0.1:7070
//	silo --examples --gateway-addr 127.0.0.1:7080 --http-addr 127.0.0.1:8081
//	silo --gateway-addr 0.0.0.0:7070 --auth-file keys.json --acl-file acl.json
//
// Every flag can also be set from the environment as SILO_ plus its name in
// upper snake case (SILO_GATEWAY_ADDR=...); a flag on the command line wins.
// SIGTERM or SIGINT shuts the silo down gracefully within --shutdown-timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	// The test agents and their hidden flag, in a build with the test hooks
	// (testhooks.go); none in the production build.
	args, registerTestAgents, err := testAgents(args)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 2
	}
	var withDemo, withExamples *bool
	p := cluster.Program{
		Name:     "silo",
		Registry: grain.NewRegistry(),
		Flags: func(fs *flag.FlagSet) {
			withDemo = fs.Bool("demo", false, "register the demo agents and, once serving, call them through the gateway and print what they answer")
			withExamples = fs.Bool("examples", false, "register the demo agents (Echo, Counter, Progress, Pipeline, FanOut, Ticker, Inbox)")
		},
		BeforeStart: func(_ *cluster.SiloConfig, reg *grain.Registry) error {
			if *withDemo || *withExamples {
				if err := demoagents.Register(reg); err != nil {
					return err
				}
			}
			if registerTestAgents != nil {
				return registerTestAgents(reg)
			}
			return nil
		},
		AfterStart: func(ctx context.Context, s *cluster.Silo) error {
			if !*withDemo {
				return nil
			}
			return demo(ctx, s.GatewayAddr(), stdout)
		},
	}
	return p.Run(args, stdout, stderr)
}
