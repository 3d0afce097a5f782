package a2a

import (
	"context"
	"sync"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// sendState is what a call knows of the task it works on, so that the
// task store need not ask etcd what the call itself just learned. The
// SDK reads around each write: before a new task's first event, the
// task's snapshot twice (the execution's retry check and the
// subscription's), and after each stored event the task's push configs
// (to send the event to each). Each is a linearizable etcd read, which
// waits for the writes being committed: with 16 senders these four reads
// took as long as the task's two writes.
//
//   - fresh: the id the SDK made for a new task (the message named none).
//     No task has it until this call writes one (ids are random UUIDs,
//     and a message cannot name a task that does not exist), so until a
//     write of it starts, a read of it is ErrTaskNotFound without asking
//     etcd.
//   - pushes: the task's push configs as the transaction of the call's
//     last write of it read them, for the SDK's List that follows the
//     write (once). A config saved later is read by the next write.
//   - hand: the turn of a blocking send's new task that the fast path
//     (fastpath.go) started and leaves to the SDK's execution.
//
// A call is one request: its execution and its subscription use it from
// two goroutines, hence the lock.
type sendState struct {
	mu sync.Mutex

	fresh spec.TaskID
	// fast: the send may take the fast path (blocking, the new task's
	// result only, no push config in the request).
	fast bool

	pushID spec.TaskID
	pushes []*mvccpb.KeyValue

	handID spec.TaskID
	hand   *handover
}

// sendOf returns the send state of the call of ctx, nil without one (the
// methods of a nil state know nothing and record nothing).
func sendOf(ctx context.Context) *sendState {
	if c := callFrom(ctx); c != nil {
		return &c.send
	}
	return nil
}

// markFresh records id as the new task the call's send makes.
func (s *sendState) markFresh(id spec.TaskID, fast bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.fresh, s.fast = id, fast
	s.mu.Unlock()
}

// unwritten reports whether id is the call's new task, not yet written.
func (s *sendState) unwritten(id spec.TaskID) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fresh != "" && s.fresh == id
}

// fastFor reports whether the send of the new task id may take the fast
// path.
func (s *sendState) fastFor(id spec.TaskID) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fast && s.fresh == id
}

// writing records that a write of id starts: from now on a read of it
// asks etcd.
func (s *sendState) writing(id spec.TaskID) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.fresh == id {
		s.fresh = ""
	}
	s.mu.Unlock()
}

// setPushes records the push configs of id a write read (nil: forget
// them).
func (s *sendState) setPushes(id spec.TaskID, kvs []*mvccpb.KeyValue, ok bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if ok {
		s.pushID, s.pushes = id, kvs
	} else {
		s.pushID, s.pushes = "", nil
	}
	s.mu.Unlock()
}

// takePushes returns the push configs of id the call's last write read,
// once.
func (s *sendState) takePushes(id spec.TaskID) ([]*mvccpb.KeyValue, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pushID == "" || s.pushID != id {
		return nil, false
	}
	kvs := s.pushes
	s.pushID, s.pushes = "", nil
	return kvs, true
}

// setHandover leaves the turn of id to the SDK's execution (see
// fastpath.go).
func (s *sendState) setHandover(id spec.TaskID, h *handover) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.handID, s.hand = id, h
	s.mu.Unlock()
}

// takeHandover returns the turn of id the fast path left, once.
func (s *sendState) takeHandover(id spec.TaskID) *handover {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hand == nil || s.handID != id {
		return nil
	}
	h := s.hand
	s.handID, s.hand = "", nil
	return h
}
