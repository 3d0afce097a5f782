package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// TestCancelAcrossSilos: an A2A task sent through silo 0 to an agent
// that lives on silo 1, and cancelled through the A2A API (through silo 0,
// which runs the execution, and through silo 1, whose cancel reaches it
// through etcd), ends canceled, and the agent's turn on silo 1 sees its
// context cancelled: the transport carried the cancellation across. The
// Waiter agent (cmd/silo, --journal) journals the start and the end of its
// turn, with the context's error. The same for an Ask of the Go SDK.
func TestCancelAcrossSilos(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 2, A2A: true})
	owned := ownedBy(c, c.Silo(1).Name, 2)
	for i, via := range []int{0, 1} {
		addr := owned[i]
		t.Run(fmt.Sprintf("cancel through %s", c.Silo(via).Name), func(t *testing.T) {
			send := a2aClient(t, c.Silo(0), addr)
			res, err := send.SendMessage(t.Context(), &spec.SendMessageRequest{
				Message: spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart("wait")),
				Config:  &spec.SendMessageConfig{ReturnImmediately: true},
			})
			if err != nil {
				t.Fatal(err)
			}
			task, ok := res.(*spec.Task)
			if !ok {
				t.Fatalf("send returned %T, want the working task", res)
			}
			line := waitJournal(t, c, "wait "+addr+" "+c.Silo(1).Name+" ", 1)
			msgID := strings.Fields(line)[5]

			got, err := a2aClient(t, c.Silo(via), addr).CancelTask(t.Context(), &spec.CancelTaskRequest{ID: task.ID})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.State != spec.TaskStateCanceled {
				t.Fatalf("cancel returned the task %s, want canceled", got.Status.State)
			}
			ended := waitJournal(t, c, "ended "+addr+" "+c.Silo(1).Name+" ", 1)
			if f := strings.Fields(ended); f[5] != msgID || !strings.HasSuffix(ended, " context canceled") {
				t.Fatalf("the turn on %s ended: %q, want the turn of message %s, context canceled", c.Silo(1).Name, ended, msgID)
			}
			read, err := send.GetTask(t.Context(), &spec.GetTaskRequest{ID: task.ID})
			if err != nil || read.Status.State != spec.TaskStateCanceled {
				t.Fatalf("the task read back: %v, %v", read, err)
			}
		})
	}

	// The Go SDK: an Ask through silo 0's gateway whose ctx is cancelled
	// sends the gateway a Cancel frame, which cancels the gateway's call,
	// whose cancellation the transport carries to silo 1. Twice: the first
	// Ask activates the agent there, the second finds it live (the peer
	// handler's other path).
	addr := ownedBy(c, c.Silo(1).Name, 1, testcluster.Principal)[0]
	sdk := c.Client(t, 0)
	for n := 1; n <= 2; n++ {
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := sdk.Ask(ctx, addr, &client.Message{Message: "wait"})
			errc <- err
		}()
		waitJournal(t, c, "wait "+addr+" "+c.Silo(1).Name+" ", n)
		cancel()
		if err := <-errc; status.Code(err) != codes.Canceled {
			t.Fatalf("cancelled Ask %d: %v, want Canceled", n, err)
		}
		if ended := waitJournal(t, c, "ended "+addr+" "+c.Silo(1).Name+" ", n); !strings.HasSuffix(ended, " context canceled") {
			t.Fatalf("turn %d on %s ended: %q, want context canceled", n, c.Silo(1).Name, ended)
		}
	}
	c.CheckJournal()
}

// ownedBy returns n Waiter addresses of owner (dev if none) that silo owns.
func ownedBy(c *testcluster.Cluster, silo string, n int, owner ...string) []string {
	o := "dev"
	if len(owner) > 0 {
		o = owner[0]
	}
	var out []string
	for i := 0; len(out) < n; i++ {
		if addr := fmt.Sprintf("Waiter:%s:w%d", o, i); c.Owner(addr) == silo {
			out = append(out, addr)
		}
	}
	return out
}

// a2aClient is an a2a-go client of the agent addr (Type:owner:alias)
// through s's A2A endpoint, as the loopback development principal dev.
func a2aClient(t *testing.T, s *testcluster.Silo, addr string) *a2aclient.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	path := "/a2a/" + strings.ReplaceAll(addr, ":", "/")
	card, err := (&agentcard.Resolver{Client: hc}).Resolve(t.Context(), "http://"+s.A2AAddr, agentcard.WithPath(path+"/.well-known/agent-card.json"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Destroy() })
	return cl
}

// waitJournal waits for the nth line of the Waiter journal that starts
// with prefix, and returns it.
func waitJournal(t *testing.T, c *testcluster.Cluster, prefix string, nth int) string {
	t.Helper()
	var found string
	testutil.WaitFor(t, fmt.Sprintf("the Waiter journal to have %d lines %q", nth, prefix), func() bool {
		b, err := os.ReadFile(c.Journal() + ".waiter")
		if err != nil {
			return false
		}
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, prefix) {
				if n++; n == nth {
					found = l
					return true
				}
			}
		}
		return false
	})
	return found
}
