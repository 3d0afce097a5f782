package a2a_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
)

// A silo program that registers the A2A agent type (remote A2A agents as
// agents) with options of its own before cluster.Main; without it, a silo
// registers the type with the defaults.
func ExampleRegisterRemote() {
	reg := grain.NewRegistry()
	if err := a2a.RegisterRemote(reg, a2a.RemoteOptions{
		MaxRounds: 5, // cancel a remote task after 5 input-required questions
	}); err != nil {
		log.Fatal(err)
	}
	cluster.Main(reg)
}

// A client configures A2A:alice:weather as the remote agent at a card URL,
// with a credential sent on every request to it, and asks it.
func Example_remoteAgent() {
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{"127.0.0.1:7070"}, client.WithPrincipal("alice"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	addr, err := c.Agents().Create(ctx, a2a.RemoteType+":weather", map[string]string{
		a2a.ConfigCardURL:     "https://weather.example.com/.well-known/agent-card.json",
		a2a.ConfigBearerToken: os.Getenv("WEATHER_TOKEN"),
	})
	if err != nil {
		log.Fatal(err)
	}
	reply, err := c.Ask(ctx, addr, &client.Message{Message: "Forecast for Rome?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reply.Message)
}

// Without authentication, callers declare their principal, so a server on
// a non-loopback address is refused (InvalidArgument) unless it
// authenticates its callers (API keys, client certificates) or is
// Insecure.
func ExampleConfig_Validate() {
	cfg := a2a.DefaultConfig()
	cfg.Addr = "0.0.0.0:9090"
	fmt.Println(status.Code(cfg.Validate()))

	cfg.Auth.KeyFile = "/etc/agentsilo/keys.json" // read when the server starts
	fmt.Println(cfg.Validate())

	cfg = a2a.DefaultConfig()
	cfg.Addr = "127.0.0.1:9090"
	fmt.Println(cfg.Validate())
	// Output:
	// InvalidArgument
	// <nil>
	// <nil>
}
