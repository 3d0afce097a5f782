//go:build agentsilo_testhooks

package main

import (
	"context"
	"fmt"
	"os"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
)

// TallyType is a test agent type, registered with the hidden --journal
// flag, for the durability tests of model agents: a count kept in the
// state store, added to by a typed skill whose turn can wait until the
// test releases it, so that a test can kill the silo of the agent that
// called it while the call runs. Skills:
//
//	add {"n": N, "hold": true|false}  adds N to the count (a keyed turn:
//	                                  once per idempotency key), after
//	                                  waiting, with hold, until the file
//	                                  <journal>.tally.release exists;
//	                                  replies {"count": C}
//	count {}                          replies {"count": C}
//
// Each add appends to <journal>.tally, one write(2) per line:
//
//	hold <address> <silo> <pid> <idempotency key>      (with hold, before waiting)
//	add <address> <silo> <pid> <idempotency key> <count after>
const TallyType = "Tally"

type tallyAdd struct {
	N    int64 `json:"n"`
	Hold bool  `json:"hold,omitempty"`
}

type tallyCount struct {
	Count int64 `json:"count"`
}

type tally struct {
	h       grain.Host
	count   *grain.State[int64]
	file    *os.File
	release string
}

// registerTally registers TallyType on reg, journaling to path.
func registerTally(reg *grain.Registry, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("tally journal: %w", err)
	}
	err = reg.Register(TallyType, func(h grain.Host) (grain.Agent, error) {
		return &tally{h: h, count: grain.NewState[int64](h), file: f, release: path + ".release"}, nil
	}, grain.TypeInfo{
		Description: "test agent: a durable count, added to once per idempotency key",
		Skills: []grain.Skill{
			grain.TypedSkill[tallyAdd, tallyCount]("add", "adds n to the count (hold: waits for the test's release first)"),
			grain.TypedSkill[struct{}, tallyCount]("count", "the count"),
		},
	})
	if err != nil {
		f.Close()
	}
	return err
}

// OnActivate implements grain.Activator: it loads the count.
func (t *tally) OnActivate(ctx context.Context) error { return t.count.Load(ctx) }

// OnMessage implements grain.Agent.
func (t *tally) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	switch m.MessageType {
	case "count":
		if err := t.count.Load(ctx); err != nil {
			return nil, err
		}
		return grain.JSONReply(m, tallyCount{t.count.Value})
	case "add":
	default:
		return nil, errs.New(codes.InvalidArgument, "tally: no skill %q (add, count)", m.MessageType)
	}
	in, err := grain.Decode[tallyAdd](m)
	if err != nil {
		return nil, err
	}
	if in.Hold {
		if err := t.record("hold", m.IdempotencyKey); err != nil {
			return nil, err
		}
		if err := demoagents.WaitForFile(ctx, t.release); err != nil {
			return nil, errs.Wrap(errs.Code(err), err, "tally")
		}
	}
	if err := t.count.Update(ctx, func(n *int64) error { *n += in.N; return nil }); err != nil {
		return nil, err
	}
	n := t.count.Value
	if err := t.record("add", fmt.Sprintf("%s %d", m.IdempotencyKey, n)); err != nil {
		return nil, err
	}
	return grain.JSONReply(m, tallyCount{n})
}

func (t *tally) record(event, rest string) error {
	line := fmt.Sprintf("%s %s %s %d %s\n", event, t.h.Address(), t.h.Silo(), os.Getpid(), rest)
	if _, err := t.file.Write([]byte(line)); err != nil {
		return fmt.Errorf("tally journal: %w", err)
	}
	return nil
}
