package grain

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAsk measures a local Ask round trip to 1,000 live agents from one
// caller per P (b.RunParallel), and BenchmarkAsk64 from 64 callers.
func BenchmarkAsk(b *testing.B) { benchAsk(b, 1) }

func BenchmarkAsk64(b *testing.B) { benchAsk(b, 64) }

func benchAsk(b *testing.B, callers int) { benchAskWith(b, callers, func(*Config) {}) }

func benchAskWith(b *testing.B, callers int, configure func(*Config)) {
	reg := NewRegistry()
	if err := reg.Register("Echo", echoFactory); err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	configure(&cfg)
	rt, err := New(cfg, reg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = rt.Close(ctx)
	}()
	addrs := make([]string, 1000)
	for i := range addrs {
		addrs[i] = "Echo:bench:" + strconv.Itoa(i)
		if _, err := rt.Ask(context.Background(), &Message{To: addrs[i], From: "Session:bench:s"}); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(max(1, callers/runtimeGOMAXPROCS()))
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(97))
		ctx := context.Background()
		for pb.Next() {
			i++
			if _, err := rt.Ask(ctx, &Message{To: addrs[i%len(addrs)], From: "Session:bench:s", Message: "x"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func runtimeGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }
