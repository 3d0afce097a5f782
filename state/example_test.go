package state_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"

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

// The contract every store keeps (Etcd, Postgres, and grain's
// MemoryStateStore used here, its twin): a save names the etag it read ("":
// none yet) and is refused with grain.ErrConflict (Aborted) if another
// write came first, so two writers of one agent cannot overwrite each other
// unknowingly. An agent reaches its store through grain.Host's LoadState and
// SaveState, or grain.State[T].
func Example() {
	ctx := context.Background()
	var st grain.StateStore = grain.NewMemoryStateStore()
	addr, err := grain.ParseAddress("Counter:acme:c1")
	if err != nil {
		log.Fatal(err)
	}

	data, etag, err := st.Load(ctx, addr)
	fmt.Printf("first load: %q %q %v\n", data, etag, err)
	v1, err := st.Save(ctx, addr, []byte("1"), "") // no state yet: etag ""
	fmt.Println("first save:", err)
	if _, err := st.Save(ctx, addr, []byte("2"), v1); err != nil {
		log.Fatal(err)
	}
	// A writer that still holds v1 is refused: it reads again and retries.
	_, err = st.Save(ctx, addr, []byte("2 again"), v1)
	fmt.Println("stale save:", errors.Is(err, grain.ErrConflict), status.Code(err))
	data, _, _ = st.Load(ctx, addr)
	fmt.Printf("state: %s\n", data)

	// A silo's --state-store names its store: "etcd" (the default) or a
	// postgres:// URL; anything else is InvalidArgument.
	_, err = state.Open(ctx, "mysql://db:3306/agents", nil, "")
	fmt.Println(status.Code(err))
	// Output:
	// first load: "" "" <nil>
	// first save: <nil>
	// stale save: true Aborted
	// state: 2
	// InvalidArgument
}
