package demoagents

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// JournalType is the agent type name RegisterJournal registers.
const JournalType = "Journal"

// Journal is a test agent for the single-activation invariant. Each
// activation appends a line to a journal file shared by every silo on the
// machine when it starts, at each message it handles, and when it ends:
//
//	start <address> <silo> <pid> <unix-nanos>
//	turn <address> <silo> <pid> <unix-nanos>
//	end <address> <silo> <pid> <unix-nanos> <reason>
//
// and it replies to any request with the name of the silo hosting it, so a
// caller learns where its message ran. A checker (tests/testcluster) pairs
// the lines and reports two activations of one address that overlap in time;
// an activation whose process died without an "end" line ends when the
// process died.
//
// Journal (with StateProbe, which journals the same way) is registered only
// when a silo runs with the hidden --journal flag.
type Journal struct {
	host grain.Host
	file *os.File
}

// RegisterJournal registers the Journal and StateProbe types on reg, both
// appending to the file at path (created if missing). The file stays open
// for the life of the process. Every line is one write(2) on a file opened
// with O_APPEND, so lines of several processes never interleave.
func RegisterJournal(reg *grain.Registry, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	err = reg.Register(JournalType, func(h grain.Host) (grain.Agent, error) {
		return &Journal{host: h, file: f}, nil
	})
	if err == nil {
		err = reg.Register(StateProbeType, func(h grain.Host) (grain.Agent, error) {
			return &StateProbe{Journal{host: h, file: f}}, nil
		})
	}
	if err != nil {
		f.Close()
	}
	return err
}

// OnActivate implements grain.Activator: it records the start. Failing to
// record fails the activation, so no activation goes unrecorded.
func (j *Journal) OnActivate(ctx context.Context) error {
	return j.record(ctx, "start", "")
}

// OnDeactivate implements grain.Deactivator: it records the end.
func (j *Journal) OnDeactivate(ctx context.Context, reason grain.Reason) {
	if err := j.record(ctx, "end", " "+reason.String()); err != nil {
		j.host.Logger().Error("journal", "err", err)
	}
}

// OnMessage implements grain.Agent: it records the turn, and the reply
// names the hosting silo.
func (j *Journal) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if err := j.record(ctx, "turn", ""); err != nil {
		return nil, err
	}
	r := m.Response()
	r.Message = j.host.Silo()
	return r, nil
}

func (j *Journal) record(ctx context.Context, event, suffix string) error {
	for {
		// While the silo is suspended, wait for it to serve again.
		if err := j.host.WaitServing(ctx); err != nil {
			return err
		}
		// The time is taken before the check: a process paused in between
		// writes nothing once it resumes past its fence, and one paused
		// after the check writes a time from before the pause.
		now := time.Now().UnixNano()
		if !j.host.Serving() {
			continue
		}
		line := fmt.Sprintf("%s %s %s %d %d%s\n", event, j.host.Address(), j.host.Silo(), os.Getpid(), now, suffix)
		if _, err := j.file.Write([]byte(line)); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		return nil
	}
}
