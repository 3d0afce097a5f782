package a2a

import (
	"context"
	"strings"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/grain"
)

// call is what the HTTP layer learns of a request before the SDK's
// handler sees it: who calls, and which agent's endpoint. It travels in
// the context, through the SDK, to the task store, the event queue and the
// executor, which run on the request's context (detached from its
// cancellation for the execution).
type call struct {
	caller *acl.Caller
	agent  grain.Address
	// base is the server's base URL as the request reached it, for the
	// extended card.
	base string
	err  error // authentication failed: the guard refuses every method
	// blocking is set by the guard for a non-streaming SendMessage: its
	// caller waits for the result only, so the executor stores the result
	// and the final state in one write (a task snapshot).
	blocking bool
	// traceparent is the request's W3C trace context, if any: the Ask
	// continues its trace.
	traceparent string
	// zeroPage: the request is a ListTasks with an explicit pageSize of 0
	// (see corners.go).
	zeroPage bool
	// head is the body of a small JSON-RPC request, read ahead (see
	// corners.go), nil for a larger one.
	head []byte
	// grpc: the request came over the gRPC binding, whose agent is its
	// tenant (set by the guard, see grpc.go).
	grpc bool
	// tenant is the tenant a gRPC request carried (see grpc.go).
	tenant string
	// send is what the call knows of the task it works on (see
	// sendstate.go).
	send sendState
}

type callKey struct{}

func withCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// The etcd key layout, under the silo's prefix:
//
//	a2a/tasks/<agent>/<principal>/<task id>  a task (taskRecord); its mod revision is its version
//	a2a/active/<task id>                     a task being worked on, and by which silo (activeRecord)
//	a2a/ctl/silos/<silo>                     a live silo serving A2A, on its lease
//	a2a/ctl/cancel/<task id>                 a cancel request for the silo running the task, on the requester's lease
//	a2a/push/<task id>/<config id>           a push notification config
//
// Agent addresses and principals never contain '/', and task and config
// ids are checked not to (validID), so no key is a prefix of another's
// family by accident.
const (
	tasksDir  = "a2a/tasks/"
	activeDir = "a2a/active/"
	ctlDir    = "a2a/ctl/"
	silosDir  = "a2a/ctl/silos/"
	cancelDir = "a2a/ctl/cancel/"
	pushDir   = "a2a/push/"
)

// taskPrefix is the key prefix of the tasks principal has with agent.
func taskPrefix(prefix string, agent grain.Address, principal string) string {
	return prefix + tasksDir + agent.String() + "/" + principal + "/"
}

// taskKey is the key of a task the call's principal has with the call's
// agent, or "" without a call.
func taskKey(ctx context.Context, prefix string, id spec.TaskID) string {
	c := callFrom(ctx)
	if c == nil || !validID(string(id)) {
		return ""
	}
	return taskPrefix(prefix, c.agent, c.caller.Principal) + string(id)
}

// validID reports whether id may be a task or push config id here: 1 to
// 128 characters of [A-Za-z0-9._-] (the SDK makes UUIDs).
func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return !strings.Contains(id, "..")
}
