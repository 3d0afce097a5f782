// Package browsertest drives a headless Chromium from a test (through
// chromedp), each step bounded and failing the test with what it was
// doing. The dashboard's browser tests use it.
package browsertest

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// StepTimeout bounds each step of a Browser.
const StepTimeout = 30 * time.Second

// Browser is a headless Chromium of one test.
type Browser struct {
	t *testing.T
	// Ctx is the browser's context, without a deadline: chromedp actions
	// run on it (or on a context derived from it) reach this browser.
	Ctx context.Context
}

// New starts chromium (its path) under ctx with a window of width by
// height; it stops when stop is called (deferred by the caller; calling
// it again does nothing). A browser that does not start fails the test.
func New(t *testing.T, ctx context.Context, chromium string, width, height int) (b *Browser, stop func()) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(width, height), chromedp.Flag("disable-gpu", true))
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	stop = func() { cancelB(); cancelA() }
	if err := chromedp.Do(bctx); err != nil { // starts the browser, on a context without a deadline
		stop()
		t.Fatal(err)
	}
	return &Browser{t: t, Ctx: bctx}, stop
}

// RunT runs f with a context of the browser bounded by StepTimeout; an
// error fails the test, naming what.
func (b *Browser) RunT(what string, f func(ctx context.Context) error) {
	b.t.Helper()
	tctx, cancel := context.WithTimeout(b.Ctx, StepTimeout)
	defer cancel()
	if err := f(tctx); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Run runs steps.
func (b *Browser) Run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	b.RunT(what, func(ctx context.Context) error { return chromedp.Do(ctx, steps...) })
}

// Text returns the text of the element sel selects.
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	var s string
	b.RunT("read "+sel, func(ctx context.Context) (err error) {
		s, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		return err
	})
	return s
}

// Eval evaluates expr in the page, awaiting it if promise.
func (b *Browser) Eval(expr string, promise bool) any {
	b.t.Helper()
	var v any
	var opts []chromedp.EvaluateOption
	if promise {
		opts = append(opts, chromedp.EvalAwaitPromise)
	}
	b.RunT("evaluate "+expr, func(ctx context.Context) (err error) {
		v, err = chromedp.Run(ctx, chromedp.Evaluate[any](expr, opts...))
		return err
	})
	return v
}
