package grain

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// A handler's error whose code a caller reads as "may have run" or "did
// not run" (a store away, a deadline) says that the turn ran and failed,
// keeping its code and its cause; one that says already is left alone.
func TestHandlerErrorSaysTheTurnRan(t *testing.T) {
	away := errs.New(codes.Unavailable, "the database is away")
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"Fails": func(Host) (Agent, error) {
			return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				switch m.Message {
				case "away":
					return nil, away
				case "deadline":
					return nil, errs.Wrap(codes.DeadlineExceeded, context.DeadlineExceeded, "load the state of X")
				case "says":
					return nil, errs.New(codes.Unavailable, "the turn ran and its state change may have landed")
				case "bad":
					return nil, errs.New(codes.InvalidArgument, "bad input")
				}
				return m.Response(), nil
			}}, nil
		},
	})
	_, err := ask(t, rt, "Fails:a", "away")
	wantCode(t, err, codes.Unavailable, "the turn of Fails:tester:a ran and failed: the database is away")
	if !errors.Is(err, away) {
		t.Errorf("%v: the cause is lost", err)
	}
	_, err = ask(t, rt, "Fails:a", "deadline")
	wantCode(t, err, codes.DeadlineExceeded, "the turn of Fails:tester:a ran and failed: load the state of X")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v: the cause is lost", err)
	}
	_, err = ask(t, rt, "Fails:a", "says")
	wantCode(t, err, codes.Unavailable, "the turn ran and its state change may have landed")
	if got := err.Error(); got != "the turn ran and its state change may have landed" {
		t.Errorf("an error that says whether the turn ran became %q", got)
	}
	_, err = ask(t, rt, "Fails:a", "bad")
	wantCode(t, err, codes.InvalidArgument, "bad input")
	if got := err.Error(); got != "bad input" {
		t.Errorf("an InvalidArgument of the handler became %q", got)
	}
}
