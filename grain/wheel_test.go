package grain

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// wheelLen counts the activations in w's buckets, checking each one's links
// and bucket key on the way.
func wheelLen(t *testing.T, w *idleWheel) int {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for key, a := range w.buckets {
		if !slices.Contains(w.ticks, key) {
			t.Errorf("bucket %d is not in the heap", key)
		}
		var prev *activation
		for ; a != nil; a = a.wnext {
			if a.wtick != key || a.wprev != prev {
				t.Errorf("%s: key %d, prev %p in bucket %d after %p", a.key, a.wtick, a.wprev, key, prev)
			}
			prev = a
			n++
		}
	}
	if len(w.ticks) != len(w.buckets) {
		t.Errorf("%d keys in the heap, %d buckets", len(w.ticks), len(w.buckets))
	}
	return n
}

// TestIdleWheel: due returns the activations whose moment has come and only
// those, whatever was removed from the buckets before; a removed or ended
// activation is not returned nor put back.
func TestIdleWheel(t *testing.T) {
	var w idleWheel
	const idle = int64(16 * time.Millisecond) // buckets of 1 ms
	w.init(idle)
	base := int64(1_700_000_000) * int64(time.Second)
	acts := make([]*activation, 12)
	for i := range acts {
		acts[i] = &activation{key: fmt.Sprint(i), idle: idle}
		// Three activations per millisecond, at 0, 1, 2 and 3 ms.
		w.add(acts[i], base+int64(i/3)*int64(time.Millisecond)+int64(i%3))
	}
	w.add(acts[0], base+int64(time.Hour)) // in the wheel already: no-op
	if n := wheelLen(t, &w); n != 12 {
		t.Fatalf("%d in the wheel, want 12", n)
	}
	// Remove the last added (head), the middle and the first added (tail)
	// of the 1 ms bucket, and one of the 2 ms bucket.
	for _, i := range []int{5, 4, 3, 7} {
		w.remove(acts[i])
		w.remove(acts[i]) // twice: no-op
	}
	if n := wheelLen(t, &w); n != 8 {
		t.Fatalf("%d in the wheel after 4 removals, want 8", n)
	}
	keys := func(as []*activation) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.key)
		}
		slices.Sort(out)
		return out
	}
	if got := keys(w.due(base-1, nil)); len(got) != 0 {
		t.Fatalf("due before the first moment: %v", got)
	}
	got := keys(w.due(base+2*int64(time.Millisecond), nil))
	if want := []string{"0", "1", "2", "6", "8"}; !slices.Equal(got, want) {
		t.Fatalf("due at 2 ms: %v, want %v", got, want)
	}
	if n := wheelLen(t, &w); n != 3 {
		t.Fatalf("%d left in the wheel, want 3", n)
	}
	// Put one back later; an ended one is not put back.
	w.add(acts[0], base+int64(10*time.Millisecond))
	acts[1].ended.Store(true)
	w.add(acts[1], base+int64(10*time.Millisecond))
	got = keys(w.due(base+int64(time.Second), nil))
	if want := []string{"0", "10", "11", "9"}; !slices.Equal(got, want) {
		t.Fatalf("due at 1 s: %v, want %v", got, want)
	}
	if n := wheelLen(t, &w); n != 0 || len(w.ticks) != 0 {
		t.Fatalf("%d activations, %d keys left in the wheel, want none", n, len(w.ticks))
	}
}

// TestIdleWheelBucketKeys: a bucket's key is the moment rounded down to a
// sixteenth of the idle timeout, within 1 ms and 1 s, and never 0.
func TestIdleWheelBucketKeys(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, c := range []struct{ at, idle, want int64 }{
		{1234567 * ms, 16 * ms, 1234567 * ms},
		{1234567*ms + 999, 16 * ms, 1234567 * ms},
		{1234567 * ms, 160 * ms, 1234560 * ms},
		{1234567 * ms, int64(time.Hour), 1234000 * ms},
		{5, 16 * ms, 1},
	} {
		if got := bucketOf(c.at, c.idle); got != c.want {
			t.Errorf("bucketOf(%d, %d) = %d, want %d", c.at, c.idle, got, c.want)
		}
	}
}

// TestIdleWheelForgetsEnded: activations that end (here by asking to) leave
// the idle wheel at once, so a silo with churn does not keep them until
// their idle moment; the live ones stay in it. (The package's TestMain
// checks for leaked goroutines.)
func TestIdleWheelForgetsEnded(t *testing.T) {
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"Quit": func(h Host) (Agent, error) {
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
				if m.Message == "quit" {
					h.Deactivate()
				}
				return reply(m, "ok")
			}}, nil
		},
	})
	for i := range 200 {
		text := "stay"
		if i%2 == 0 {
			text = "quit"
		}
		if _, err := ask(t, rt, fmt.Sprintf("Quit:a:%d", i), text); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the quitting half to end", func() bool { return rt.Len() == 100 })
	if n := wheelLen(t, &rt.wheel); n != 100 {
		t.Fatalf("%d activations in the idle wheel, want the 100 live ones", n)
	}
}
