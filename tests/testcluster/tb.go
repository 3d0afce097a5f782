package testcluster

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
)

// TB is the part of testing.TB the harness uses. *testing.T and *testing.B
// satisfy it, and Run gives programs one.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	TempDir() string
	Context() context.Context
}

// Run runs f as a test would run, for programs: f's TB logs to stderr,
// Fatalf ends f (as in a test, by runtime.Goexit), and the cleanups
// registered on it run when f returns, last first. Run reports whether f
// failed.
func Run(ctx context.Context, f func(tb TB)) (failed bool) {
	ctx, cancel := context.WithCancel(ctx)
	p := &programTB{ctx: ctx}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			cancel()
			p.runCleanups()
		}()
		f(p)
	}()
	<-done
	return p.Failed()
}

type programTB struct {
	ctx context.Context

	mu       sync.Mutex
	failed   bool
	cleanups []func()
}

func (p *programTB) Helper() {}

func (p *programTB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func (p *programTB) Errorf(format string, args ...any) {
	p.Logf(format, args...)
	p.mu.Lock()
	p.failed = true
	p.mu.Unlock()
}

func (p *programTB) Fatalf(format string, args ...any) {
	p.Errorf(format, args...)
	runtime.Goexit()
}

func (p *programTB) Failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

func (p *programTB) Cleanup(f func()) {
	p.mu.Lock()
	p.cleanups = append(p.cleanups, f)
	p.mu.Unlock()
}

func (p *programTB) TempDir() string {
	dir, err := os.MkdirTemp("", "testcluster-")
	if err != nil {
		p.Fatalf("testcluster: %v", err)
	}
	if os.Getenv("TESTCLUSTER_KEEP") != "" {
		// For a look at the silos' logs and the journal after a failed run.
		fmt.Fprintf(os.Stderr, "testcluster: keeping %s (TESTCLUSTER_KEEP)\n", dir)
		return dir
	}
	p.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (p *programTB) Context() context.Context { return p.ctx }

func (p *programTB) runCleanups() {
	for {
		p.mu.Lock()
		n := len(p.cleanups)
		if n == 0 {
			p.mu.Unlock()
			return
		}
		f := p.cleanups[n-1]
		p.cleanups = p.cleanups[:n-1]
		p.mu.Unlock()
		f()
	}
}
