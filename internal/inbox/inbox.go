// Package inbox gives a turn that a protocol server (A2A, MCP) asks of an
// agent a sender address of its own, so that what the agent pushes to its
// caller during the turn (a Send to m.From) reaches that turn.
//
// An inbox address is a session address of the caller's principal whose
// alias starts with the server's kind, Session:<principal>:<kind>-<id>@<silo>
// (gateway sessions never start so). Like a gateway session's address it
// names its silo, so the cluster's session routing brings pushes from agents
// on any silo to the silo that opened the inbox. Inboxes is the runtime's
// siloapi.SessionRouter on such a silo: a message to an open inbox goes there,
// every other session message to the next router, the gateway's sessions.
//
//	box := inboxes.Open(principal, inbox.MCP)
//	defer inboxes.Close(box)
//	msg.From = box.Addr()
//	... rt.Ask(ctx, msg) on a goroutine; meanwhile:
//	case <-box.Signal(): for _, p := range box.Take() { ... }
package inbox

import (
	"context"
	"strings"
	"sync"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// Kind names the server whose turn an inbox belongs to; it starts the
// inbox address's alias.
type Kind string

// The kinds of inboxes.
const (
	A2A Kind = "a2a-"
	MCP Kind = "mcp-"
)

// label is how errors name a turn of kind k.
func (k Kind) label() string {
	switch k {
	case A2A:
		return "A2A"
	case MCP:
		return "MCP"
	}
	return strings.TrimSuffix(string(k), "-")
}

// Backlog bounds what an agent may push to one turn before the server has
// taken it: past it, Send gets ResourceExhausted, as with a client
// session's backlog.
const Backlog = 1000

// Inboxes routes messages to the open inboxes of a silo, in front of the
// next session router. Its methods are safe for concurrent use.
type Inboxes struct {
	silo string
	next siloapi.SessionRouter

	mu sync.Mutex
	m  map[string]*Inbox
}

// New returns the inboxes of silo, in front of next (nil: none).
func New(silo string, next siloapi.SessionRouter) *Inboxes {
	return &Inboxes{silo: silo, next: next, m: make(map[string]*Inbox)}
}

// Inbox collects the messages pushed to one turn, in order.
type Inbox struct {
	addr string
	kind Kind

	mu     sync.Mutex
	queue  []*grain.Message
	closed bool
	signal chan struct{} // has a value while queue is not empty
}

// Addr is the inbox's address, the turn's sender.
func (b *Inbox) Addr() string { return b.addr }

// Signal has a value when something was pushed since the last Take.
func (b *Inbox) Signal() <-chan struct{} { return b.signal }

// Is reports whether addr is the address of an inbox of any kind.
func Is(addr string) bool {
	a, err := grain.ParseAddress(addr)
	if err != nil || a.Type != grain.SessionType {
		return false
	}
	return strings.HasPrefix(a.Alias, string(A2A)) || strings.HasPrefix(a.Alias, string(MCP))
}

// IsKind reports whether addr is the address of an inbox of kind k.
func IsKind(addr string, k Kind) bool {
	a, err := grain.ParseAddress(addr)
	return err == nil && a.Type == grain.SessionType && strings.HasPrefix(a.Alias, string(k))
}

// Open makes an inbox of kind k for a turn of principal.
func (in *Inboxes) Open(principal string, k Kind) *Inbox {
	id := string(k) + grain.NewID()
	if in.silo != "" && len(id)+1+len(in.silo) <= 128 {
		id += "@" + in.silo
	}
	b := &Inbox{addr: grain.SessionType + ":" + principal + ":" + id, kind: k, signal: make(chan struct{}, 1)}
	in.mu.Lock()
	in.m[b.addr] = b
	in.mu.Unlock()
	return b
}

// Close removes b: later pushes to it are NotFound.
func (in *Inboxes) Close(b *Inbox) {
	in.mu.Lock()
	delete(in.m, b.addr)
	in.mu.Unlock()
	b.mu.Lock()
	b.closed = true
	b.queue = nil
	b.mu.Unlock()
}

// Len reports how many inboxes are open.
func (in *Inboxes) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.m)
}

// DeliverToSession implements siloapi.SessionRouter. It never blocks.
func (in *Inboxes) DeliverToSession(ctx context.Context, msg *agentsilov1.AgentMessage) error {
	if msg == nil || !Is(msg.To) {
		if in.next == nil {
			return errs.New(codes.NotFound, "no client session %s", protocol.Clip(msg.GetTo()))
		}
		return in.next.DeliverToSession(ctx, msg)
	}
	in.mu.Lock()
	b := in.m[msg.To]
	in.mu.Unlock()
	if b == nil {
		return errs.New(codes.NotFound, "the turn %s has ended", protocol.Clip(msg.To))
	}
	return b.put(grain.MessageFromProto(msg))
}

func (b *Inbox) put(msg *grain.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errs.New(codes.NotFound, "the %s turn %s has ended", b.kind.label(), protocol.Clip(b.addr))
	}
	if len(b.queue) >= Backlog {
		return errs.New(codes.ResourceExhausted, "the %s turn %s has %d pushed messages not yet sent on", b.kind.label(), protocol.Clip(b.addr), len(b.queue))
	}
	b.queue = append(b.queue, msg)
	select {
	case b.signal <- struct{}{}:
	default:
	}
	return nil
}

// Take returns what was pushed since the last Take, in order.
func (b *Inbox) Take() []*grain.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue
	b.queue = nil
	return q
}
