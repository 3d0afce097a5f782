package a2a

import (
	"context"
	"errors"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
)

// guard is the SDK call interceptor that does for A2A what the gateway's
// client grain does for gRPC: it refuses a caller the HTTP layer could not
// authenticate, names the caller to the SDK (CallContext.User), and checks
// the ACL on the endpoint's agent:
//
//	SendMessage, SendStreamingMessage, CancelTask,
//	CreateTaskPushConfig, DeleteTaskPushConfig      Message
//	GetTask, ListTasks, SubscribeToTask,
//	GetTaskPushConfig, ListTaskPushConfigs          Read
//
// What a caller then sees of tasks is its own only (the task store's keys
// are per principal). It also checks a message can be carried to an agent
// before a task is made for it. Running it before the SDK's handler lets
// the SDK's transports write its errors in each protocol's form.
type guard struct {
	a2asrv.PassthroughCallInterceptor
	s *Server
}

// Before implements a2asrv.CallInterceptor.
func (g guard) Before(ctx context.Context, cc *a2asrv.CallContext, req *a2asrv.Request) (context.Context, any, error) {
	c := callFrom(ctx)
	if c == nil {
		return ctx, nil, spec.ErrUnauthenticated
	}
	if c.err != nil {
		return ctx, nil, specError(c.err)
	}
	cc.User = &a2asrv.User{Name: c.caller.Principal, Authenticated: g.s.auth.Enabled()}
	if c.grpc {
		if err := g.s.tenantAgent(c, cc.Tenant()); err != nil {
			return ctx, nil, err
		}
	}
	c.blocking = cc.Method() == "SendMessage"
	need := acl.Read
	switch cc.Method() {
	case "SendMessage", "SendStreamingMessage", "CancelTask", "CreateTaskPushConfig", "DeleteTaskPushConfig":
		need = acl.Message
	case "GetExtendedAgentCard":
		return ctx, nil, nil
	}
	if g.s.acl != nil {
		if err := g.s.acl.Authorize(c.caller, c.agent.Type, c.agent.Owner, c.agent.Alias, need); err != nil {
			return ctx, nil, specError(err)
		}
	}
	switch p := req.Payload.(type) {
	case *spec.SendMessageRequest:
		if p == nil || p.Message == nil {
			return ctx, nil, invalidParams("no message")
		}
		m, err := toAgentMessage(p.Message)
		if err != nil {
			return ctx, nil, err
		}
		if sc := c.caller.MissingScope(g.s.reg.RequiredScopes(c.agent.Type, m.MessageType)); sc != "" {
			return ctx, nil, specError(acl.ScopeDenied(c.caller, sc, m.MessageType, c.agent.String()))
		}
		if err := g.s.checkTaskOpen(ctx, p); err != nil {
			return ctx, nil, err
		}
		if p.Config != nil && p.Config.PushConfig != nil {
			if err := checkConfig(p.Config.PushConfig); err != nil {
				return ctx, nil, err
			}
		}
	case *spec.GetTaskRequest:
		if err := checkGetTask(p); err != nil {
			return ctx, nil, err
		}
	case *spec.ListTasksRequest:
		if err := checkListTasks(c, p); err != nil {
			return ctx, nil, err
		}
	case *spec.PushConfig:
		if err := checkConfig(p); err != nil {
			return ctx, nil, err
		}
	}
	return ctx, nil, nil
}

// specError gives an agentsilo error its A2A form.
func specError(err error) error {
	var kind error
	switch errs.Code(err) {
	case codes.Unauthenticated:
		kind = spec.ErrUnauthenticated
	case codes.PermissionDenied:
		kind = spec.ErrUnauthorized
	case codes.InvalidArgument:
		kind = spec.ErrInvalidRequest
	case codes.NotFound:
		kind = spec.ErrTaskNotFound
	default:
		kind = spec.ErrInternalError
	}
	msg := err.Error()
	var e *errs.Error
	if errors.As(err, &e) {
		msg = e.Message()
	}
	return spec.NewError(kind, msg)
}
