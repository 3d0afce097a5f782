// Command silo is the silo program of the A2A process tests and of
// tests/a2abench: cmd/silo's demo agents and the A2A test types of
// package a2atest (Interview, Fail, Stream, Block, Skilled), with every flag
// of cmd/silo.
package main

import (
	"log"

	"github.com/agentsilo/agentsilo/a2a/a2atest"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
)

func main() {
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		log.Fatal(err)
	}
	if err := a2atest.Register(reg); err != nil {
		log.Fatal(err)
	}
	cluster.Main(reg)
}
