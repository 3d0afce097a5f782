package state_test

import (
	"context"
	"log"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/state"
)

// A runtime of one's own with the store a silo's --state-store names:
// "" or "etcd" for the silo's etcd, or a postgres:// URL.
func ExampleOpen() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	st, err := state.Open(ctx, os.Getenv("STATE_STORE"), cli, "/agentsilo/")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	cfg := grain.DefaultConfig()
	cfg.State = st // agents' LoadState, SaveState and grain.State[T] use it
	rt, err := grain.New(cfg, grain.NewRegistry())
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(ctx)
}
