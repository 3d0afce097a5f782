//go:build !race

package grain

import (
	"context"
	"testing"
	"time"
)

// maxAskAllocs bounds the allocations of one local Ask to a live agent: the
// message, its reply (msg.Response()), the turn (the handler's context) and
// the two ids, request's and reply's, made in one (BenchmarkAsk reports
// them; it was 6 when the envelope and the wait for the reply allocated).
// The race detector allocates on its own, so this runs without it (.ci/run
// runs it so).
const maxAskAllocs = 4

func TestAskAllocs(t *testing.T) {
	reg := NewRegistry()
	if err := reg.Register("Echo", echoFactory); err != nil {
		t.Fatal(err)
	}
	rt, err := New(DefaultConfig(), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = rt.Close(ctx)
	}()
	ctx := context.Background()
	if _, err := rt.Ask(ctx, &Message{To: "Echo:bench:a", From: "Session:bench:s"}); err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(2000, func() {
		if _, err := rt.Ask(ctx, &Message{To: "Echo:bench:a", From: "Session:bench:s", Message: "x"}); err != nil {
			t.Fatal(err)
		}
	})
	if n > maxAskAllocs {
		t.Fatalf("a local Ask allocates %.1f times, want at most %d", n, maxAskAllocs)
	}
	t.Logf("a local Ask allocates %.1f times", n)
}
