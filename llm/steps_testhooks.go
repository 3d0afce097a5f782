//go:build agentsilo_testhooks

package llm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// This file is built only with the agentsilo_testhooks tag (tests/testcluster
// builds `silo` with it): it lets a process test hold a model agent's turn
// just after a step is recorded, to kill the silo there.
//
// With AGENTSILO_LLM_HOLD set to a step (started, model or tool) and
// AGENTSILO_LLM_HOLD_FILE to a path, the first turn that records that step,
// of any silo sharing the path, creates the file (once, whichever process is
// first) holding "<step> <pid>", and waits there until its context
// ends: the test sees the file and kills the process. A turn that
// finds the file there already goes on, so that the turn resumed on another
// silo started with the same environment runs to its end.
const (
	holdEnv     = "AGENTSILO_LLM_HOLD"
	holdFileEnv = "AGENTSILO_LLM_HOLD_FILE"
)

func init() {
	step, file := os.Getenv(holdEnv), os.Getenv(holdFileEnv)
	if step == "" || file == "" {
		return
	}
	stepHook = func(ctx context.Context, s string) {
		if s != step {
			return
		}
		// Written beside, then linked: the file appears whole, and only
		// once (link fails if the name exists).
		tmp, err := os.CreateTemp(filepath.Dir(file), ".llm-hold-*")
		if err == nil {
			_, err = fmt.Fprintf(tmp, "%s %d\n", s, os.Getpid())
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "llm: %s: %v\n", holdFileEnv, err)
			return
		}
		err = os.Link(tmp.Name(), file)
		os.Remove(tmp.Name())
		if err != nil {
			if !errors.Is(err, os.ErrExist) {
				fmt.Fprintf(os.Stderr, "llm: %s: %v\n", holdFileEnv, err)
			}
			return
		}
		<-ctx.Done()
	}
}
