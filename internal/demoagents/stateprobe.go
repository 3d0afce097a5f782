package demoagents

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// StateProbeType is the agent type name of StateProbe, which
// RegisterJournal registers beside Journal.
const StateProbeType = "StateProbe"

// stateProbePoll is how often a "hold" turn looks for its release file.
const stateProbePoll = 10 * time.Millisecond

// StateProbe is a test agent for the fencing of state writes: a string kept
// in the silo's state store, read and written in separate steps so that a
// test can pause the silo between them. Like Journal, it writes "start",
// "turn" and "end" lines to the journal (so the journal checker covers it);
// its "turn" line is written after the state is loaded. Messages:
//
//	get              reply the stored value ("" if none)
//	set VALUE        load, save VALUE with the etag loaded, reply VALUE
//	hold VALUE FILE  load, write the turn line, wait until FILE exists,
//	                 then save VALUE with the etag loaded and reply VALUE
//
// A test sends "hold", waits for the turn line (the load is done), freezes
// the silo, lets another silo write, creates FILE and thaws the silo: the
// held save then comes after its silo lost the agent, and must fail. Every
// save's outcome is logged ("state probe save", with the value, its gRPC
// code and error), whether the silo still serves or not, so that the test
// can see what a fenced silo's save returned.
//
// StateProbe is registered only when a silo runs with the hidden --journal
// flag.
type StateProbe struct{ Journal }

// OnMessage implements grain.Agent.
func (p *StateProbe) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	cmd, rest, _ := strings.Cut(strings.TrimSpace(m.Message), " ")
	data, etag, err := p.host.LoadState(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.record(ctx, "turn", ""); err != nil {
		return nil, err
	}
	r := m.Response()
	switch cmd {
	case "get":
		r.Message = string(data)
		return r, nil
	case "set":
		r.Message = rest
	case "hold":
		value, file, ok := strings.Cut(rest, " ")
		if !ok || value == "" || file == "" {
			return nil, errs.New(codes.InvalidArgument, "state probe: want hold VALUE FILE, got %q", m.Message)
		}
		if err := WaitForFile(ctx, file); err != nil {
			return nil, errs.Wrap(errs.Code(err), err, "state probe")
		}
		r.Message = value
	default:
		return nil, errs.New(codes.InvalidArgument, "state probe: want get, set VALUE or hold VALUE FILE, got %q", m.Message)
	}
	_, err = p.host.SaveState(ctx, []byte(r.Message), etag)
	p.host.Logger().InfoContext(ctx, "state probe save", "value", r.Message, "code", errs.Code(err).String(), "err", err)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// WaitForFile waits until the file at path exists, or ctx ends. It looks
// once more after ctx ends, so that a file that appeared while the process
// was paused is found even if ctx ended meanwhile too.
func WaitForFile(ctx context.Context, path string) error {
	tick := time.NewTicker(stateProbePoll)
	defer tick.Stop()
	for {
		_, err := os.Stat(path)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, os.ErrNotExist):
			return errs.New(codes.Internal, "wait for %s: %w", path, err)
		case ctx.Err() != nil:
			return errs.New(errs.Code(ctx.Err()), "%s did not appear: %w", path, ctx.Err())
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}
