package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser is a headless Chromium for a test, each step bounded by 30 s
// and failing the test with what it was doing.
type browser struct {
	t   *testing.T
	ctx context.Context // the browser's, without a deadline
}

// newBrowser starts chromium (its path) under ctx; it stops when the
// test's function returns (stop, deferred by the caller).
func newBrowser(t *testing.T, ctx context.Context, chromium string) (b *browser, stop func()) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1200, 760), chromedp.Flag("disable-gpu", true))
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	stop = func() { cancelB(); cancelA() }
	if err := chromedp.Do(bctx); err != nil { // starts the browser, on a context without a deadline
		stop()
		t.Fatal(err)
	}
	return &browser{t: t, ctx: bctx}, stop
}

// runT runs f with a context of the browser bounded by 30 s.
func (b *browser) runT(what string, f func(ctx context.Context) error) {
	b.t.Helper()
	tctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := f(tctx); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// run runs steps.
func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	b.runT(what, func(ctx context.Context) error { return chromedp.Do(ctx, steps...) })
}

// text returns the text of the element sel selects.
func (b *browser) text(sel string) string {
	b.t.Helper()
	var s string
	b.runT("read "+sel, func(ctx context.Context) (err error) {
		s, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		return err
	})
	return s
}

// eval evaluates expr in the page (awaiting it if promise).
func (b *browser) eval(expr string, promise bool) any {
	b.t.Helper()
	var v any
	var opts []chromedp.EvaluateOption
	if promise {
		opts = append(opts, chromedp.EvalAwaitPromise)
	}
	b.runT("evaluate "+expr, func(ctx context.Context) (err error) {
		v, err = chromedp.Run(ctx, chromedp.Evaluate[any](expr, opts...))
		return err
	})
	return v
}
