package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/client"
)

// wantInvalid fails t unless err is InvalidArgument, both ways a caller
// tests for it, and its message names field.
func wantInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	if !errors.Is(err, client.ErrInvalidArgument) || status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field) {
		t.Errorf("%s: %v; want InvalidArgument naming %s", what, err, field)
	}
}

// A message with a string that is not UTF-8 cannot be encoded: Ask, Send and
// Event return InvalidArgument at once, send nothing, and leave the session's
// stream, and the calls in flight on it, alone. (The SDK used to send it
// again and again on a stream it broke each time, until its deadline.)
func TestInvalidUTF8IsInvalidArgument(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr})
	session := c.Address()
	slow, cancelSlow := context.WithCancel(t.Context())
	inflight := make(chan error, 1)
	go func() {
		_, err := c.Ask(slow, "Slow:x", nil)
		inflight <- err
	}()
	<-s.started

	// No deadline on the contexts: a call that retried would wait out the
	// client's 30 s timeout and end DeadlineExceeded.
	for _, tc := range []struct {
		msg   *client.Message
		field string
	}{
		{&client.Message{Message: "caf\xe9"}, "message"},
		{&client.Message{MessageType: "t\xff"}, "message_type"},
		{&client.Message{State: map[string]string{"k": "\xc3"}}, `state["k"]`},
		{&client.Message{State: map[string]string{"\xff": "v"}}, "state key"},
		{&client.Message{Files: []string{"a", "b\xfe"}}, "files[1]"},
	} {
		_, err := c.Ask(t.Context(), "Echo:x", tc.msg)
		wantInvalid(t, "Ask", err, tc.field)
		wantInvalid(t, "Send", c.Send(t.Context(), "Echo:x", tc.msg), tc.field)
		wantInvalid(t, "Event", c.Event(t.Context(), "Echo:x", tc.msg), tc.field)
	}
	_, err := c.Ask(t.Context(), "Echo:\xff", nil)
	wantInvalid(t, "Ask to a bad address", err, "to")
	// Bytes are bytes.
	if _, err := c.Ask(t.Context(), "Echo:x", &client.Message{Data: []byte{0xff, 0xfe}}); err != nil {
		t.Fatalf("Ask with binary data: %v", err)
	}

	// Nothing reached the silo (only Slow and the last Echo are active), and
	// the session's stream never broke: the call in flight on it is still
	// running, and ends when cancelled, not with Unavailable.
	if n := s.rt.Len(); n != 2 {
		t.Errorf("%d activations, want 2 (Slow:x, Echo:x)", n)
	}
	cancelSlow()
	if err := <-inflight; status.Code(err) != codes.Canceled {
		t.Fatalf("the call in flight: %v, want Canceled", err)
	}
	<-s.cancelled
	if c.Address() != session {
		t.Fatalf("session %s, was %s: the stream was re-opened", c.Address(), session)
	}
}

// The unary calls check their requests too.
func TestInvalidUTF8UnaryCalls(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr})
	ctx := t.Context()
	_, err := c.Agents().Create(ctx, "Echo:\xff", nil)
	wantInvalid(t, "CreateAgent", err, "address")
	_, err = c.Agents().Create(ctx, "Echo:cfg", map[string]string{"k": "v\xff"})
	wantInvalid(t, "CreateAgent config", err, `config["k"]`)
	_, err = c.Agents().List(ctx, "", "Echo\xff")
	wantInvalid(t, "Agents", err, "type")
	_, err = c.Agents().Reminders(ctx, "Echo:\xff")
	wantInvalid(t, "Reminders", err, "agent")
	_, err = c.ACL().AddRule(ctx, client.ACLRule{OwnerPattern: "a\xff", CallerPattern: "*", Permission: "Message"})
	wantInvalid(t, "ACL.AddRule", err, "rule.owner_pattern")
	wantInvalid(t, "ACL.SetGroup", c.ACL().SetGroup(ctx, "g", []string{"alice", "b\xffb"}), "group.members[1]")
	_, err = c.ACL().Check(ctx, "alice\xff", "Echo:bob:x", "Message")
	wantInvalid(t, "ACL.Check", err, "caller")
	// The session is fine.
	if r, err := c.Ask(ctx, "Echo:x", &client.Message{Message: "still here"}); err != nil || r.Message != "still here" {
		t.Fatalf("Ask after: %v, %v", r, err)
	}
}

// What gRPC would refuse as metadata is refused by Dial.
func TestDialRefusesBadCredentials(t *testing.T) {
	s := start(t)
	for _, o := range []client.Option{client.WithPrincipal("al\xffice"), client.WithPrincipal("bob\n"), client.WithAPIKey("key\x00")} {
		c, err := client.Dial(t.Context(), []string{s.addr}, o)
		if !errors.Is(err, client.ErrInvalidArgument) {
			if c != nil {
				c.Close()
			}
			t.Errorf("Dial: %v, want InvalidArgument", err)
		}
	}
}

// An address without a port is the gateway's default port, 7070. A dialer
// sees where the client dials and connects to the test silo instead.
func TestDialDefaultPort(t *testing.T) {
	s := start(t)
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1", "127.0.0.1:7070"},
		{"[::1]", "[::1]:7070"},
		{"::1", "[::1]:7070"},
		{"127.0.0.1:", "127.0.0.1:7070"},
		{"[::1]:7171", "[::1]:7171"},
		{" 127.0.0.2 ", "127.0.0.2:7070"},
	} {
		var mu sync.Mutex
		var dialed []string
		dialer := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			mu.Lock()
			dialed = append(dialed, addr)
			mu.Unlock()
			return (&net.Dialer{}).DialContext(ctx, "tcp", s.addr)
		})
		c, err := client.Dial(t.Context(), []string{tc.addr}, client.WithDialOptions(dialer))
		if err != nil {
			t.Fatalf("Dial %q: %v", tc.addr, err)
		}
		if _, err := c.Ask(t.Context(), "Echo:x", nil); err != nil {
			t.Errorf("Ask through %q: %v", tc.addr, err)
		}
		c.Close()
		mu.Lock()
		if len(dialed) == 0 || dialed[0] != tc.want {
			t.Errorf("Dial %q dialed %q, want %s", tc.addr, dialed, tc.want)
		}
		mu.Unlock()
	}
	for _, bad := range []string{"", "a:b:c", "[::1", "host name"} {
		if _, err := client.Dial(t.Context(), []string{bad}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("Dial %q: %v, want InvalidArgument", bad, err)
		}
	}
}
