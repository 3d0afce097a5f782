//go:build agentsilo_testhooks

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// WaiterType is a test agent type, registered with the hidden --journal
// flag: a Waiter's turn waits until its context ends, so that a test can
// see a cancellation reach the turn, wherever the caller is. It appends to
// the file <journal>.waiter, one write(2) per line:
//
//	wait <address> <silo> <pid> <unix-nanos> <message id>
//	ended <address> <silo> <pid> <unix-nanos> <message id> <ctx error>
//
// and replies with the context's error (code Canceled or DeadlineExceeded).
const WaiterType = "Waiter"

type waiter struct {
	h    grain.Host
	file *os.File
}

// registerWaiter registers WaiterType on reg, journaling to path.
func registerWaiter(reg *grain.Registry, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("waiter journal: %w", err)
	}
	err = reg.Register(WaiterType, func(h grain.Host) (grain.Agent, error) { return &waiter{h: h, file: f}, nil },
		grain.TypeInfo{Description: "test agent: each turn waits until its context ends"})
	if err != nil {
		f.Close()
	}
	return err
}

// OnMessage implements grain.Agent.
func (w *waiter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if err := w.record("wait", m.ID); err != nil {
		return nil, err
	}
	<-ctx.Done()
	err := ctx.Err()
	if rerr := w.record("ended", m.ID+" "+err.Error()); rerr != nil {
		w.h.Logger().Error("waiter journal", "err", rerr)
	}
	code := codes.Canceled
	if err == context.DeadlineExceeded {
		code = codes.DeadlineExceeded
	}
	return nil, errs.Wrap(code, err, "waiter")
}

func (w *waiter) record(event, rest string) error {
	line := fmt.Sprintf("%s %s %s %d %d %s\n", event, w.h.Address(), w.h.Silo(), os.Getpid(), time.Now().UnixNano(), rest)
	if _, err := w.file.Write([]byte(line)); err != nil {
		return fmt.Errorf("waiter journal: %w", err)
	}
	return nil
}
