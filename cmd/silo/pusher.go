//go:build agentsilo_testhooks

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// sessionPusherType is the test agent that pushes numbered messages to a
// client session, registered with the hidden --journal flag.
const sessionPusherType = "SessionPusher"

// sessionPusher pushes to a client session on request. To
// "push ADDR N [COUNT]" it sends COUNT (default 1) one-way messages to
// ADDR, whose texts are N, N+1, ... (message type "seq"), stopping at the
// first that fails, and answers "<sent> <code>": how many were taken, and
// the number of the gRPC code of the failure that stopped it (0, OK, if
// none). The tests of
// sessions surviving their gateway's silo (tests/sessions_cluster_test.go)
// drive it.
type sessionPusher struct{ host grain.Host }

func registerSessionPusher(reg *grain.Registry) error {
	return reg.Register(sessionPusherType, func(h grain.Host) (grain.Agent, error) {
		return &sessionPusher{host: h}, nil
	})
}

// OnMessage implements grain.Agent.
func (p *sessionPusher) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	f := strings.Fields(m.Message)
	if len(f) < 3 || len(f) > 4 || f[0] != "push" {
		return nil, errs.New(codes.InvalidArgument, "want: push ADDR N [COUNT]")
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "N: %w", err)
	}
	count := 1
	if len(f) == 4 {
		if count, err = strconv.Atoi(f[3]); err != nil || count < 1 {
			return nil, errs.New(codes.InvalidArgument, "COUNT: want a positive number")
		}
	}
	sent, code := 0, codes.OK
	for ; sent < count; sent++ {
		err := p.host.Send(ctx, f[1], &grain.Message{MessageType: "seq", Message: strconv.Itoa(n + sent)})
		if err != nil {
			code = errs.Code(err)
			break
		}
	}
	r := m.Response()
	r.Message = fmt.Sprintf("%d %d", sent, uint32(code))
	return r, nil
}
