package a2a

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/errs"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// inboxAlias starts the alias of an A2A turn's sender address,
// Session:<principal>:a2a-<id>@<silo>. Gateway sessions never start so.
const inboxAlias = "a2a-"

// inboxBacklog bounds what an agent may push to one turn before the
// executor has turned it into events: past it, Send gets ResourceExhausted,
// as with a client session's backlog.
const inboxBacklog = 1000

// Inboxes is the runtime's grain.SessionRouter on a silo that serves A2A:
// a message to an A2A turn's sender address (what an agent pushes to
// m.From during the turn) goes to that turn's inbox, and every other
// session message to next, the gateway's sessions. Like those, an inbox
// address names its silo, so the cluster's session routing brings pushes
// from agents on any silo here. It is made before the runtime and handed
// to the Server. Its methods are safe for concurrent use.
type Inboxes struct {
	silo string
	next grain.SessionRouter

	mu sync.Mutex
	m  map[string]*inbox
}

// NewInboxes returns the inboxes of silo, in front of next.
func NewInboxes(silo string, next grain.SessionRouter) *Inboxes {
	return &Inboxes{silo: silo, next: next, m: make(map[string]*inbox)}
}

// inbox collects the messages pushed to one turn, in order.
type inbox struct {
	addr string

	mu     sync.Mutex
	queue  []*grain.Message
	closed bool
	signal chan struct{} // has a value while queue is not empty
}

// IsInbox reports whether addr is an A2A turn's sender address.
func IsInbox(addr string) bool {
	a, err := grain.ParseAddress(addr)
	return err == nil && a.Type == grain.SessionType && strings.HasPrefix(a.Alias, inboxAlias)
}

// open makes an inbox for a turn of principal.
func (in *Inboxes) open(principal string) *inbox {
	id := inboxAlias + grain.NewID()
	if in.silo != "" && len(id)+1+len(in.silo) <= 128 {
		id += "@" + in.silo
	}
	b := &inbox{addr: grain.SessionType + ":" + principal + ":" + id, signal: make(chan struct{}, 1)}
	in.mu.Lock()
	in.m[b.addr] = b
	in.mu.Unlock()
	return b
}

// close removes b: later pushes to it are NotFound.
func (in *Inboxes) close(b *inbox) {
	in.mu.Lock()
	delete(in.m, b.addr)
	in.mu.Unlock()
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// DeliverToSession implements grain.SessionRouter. It never blocks.
func (in *Inboxes) DeliverToSession(ctx context.Context, msg *grain.Message) error {
	if msg == nil || !IsInbox(msg.To) {
		if in.next == nil {
			return errs.New(codes.NotFound, "no client session %s", protocol.Clip(msg.GetTo()))
		}
		return in.next.DeliverToSession(ctx, msg)
	}
	in.mu.Lock()
	b := in.m[msg.To]
	in.mu.Unlock()
	if b == nil {
		return errs.New(codes.NotFound, "the A2A turn %s has ended", protocol.Clip(msg.To))
	}
	return b.put(msg)
}

func (b *inbox) put(msg *grain.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errs.New(codes.NotFound, "the A2A turn %s has ended", protocol.Clip(b.addr))
	}
	if len(b.queue) >= inboxBacklog {
		return errs.New(codes.ResourceExhausted, "the A2A turn %s has %d pushed messages not yet sent on", protocol.Clip(b.addr), len(b.queue))
	}
	b.queue = append(b.queue, msg)
	select {
	case b.signal <- struct{}{}:
	default:
	}
	return nil
}

// take returns what was pushed since the last take, in order.
func (b *inbox) take() []*grain.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue
	b.queue = nil
	return q
}
