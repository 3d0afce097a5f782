package cluster

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/grain"
)

// The observer behind the runtime's hot path counts by type, kind and code,
// keeps unregistered types out of the labels, and allocates nothing once a
// series is in use.
func TestMetricsObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newMetrics(reg); err == nil {
		t.Fatal("a second silo's metrics registered in the same registry")
	}
	m.Handled("Echo", grain.KindRequest, codes.OK, time.Millisecond)
	m.Handled("Echo", grain.KindRequest, codes.OK, time.Millisecond)
	m.Handled("Echo", grain.KindEvent, codes.Internal, time.Millisecond)
	m.Refused("", grain.KindRequest, codes.NotFound)
	m.Refused("Echo", grain.KindOneWay, codes.Code(99))
	m.denied(acl.Message)
	m.observeLateness(-time.Second)

	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"Echo", "REQUEST", "OK"}, 2},
		{[]string{"Echo", "EVENT", "Internal"}, 1},
		{[]string{unregisteredType, "REQUEST", "NotFound"}, 1},
		{[]string{"Echo", "ONE_WAY", "Unknown"}, 1},
	} {
		if got := testutil.ToFloat64(m.calls.WithLabelValues(c.labels...)); got != c.want {
			t.Errorf("calls%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.aclDenials.WithLabelValues("Message")); got != 1 {
		t.Errorf("acl denials = %v", got)
	}
	if n := testutil.CollectAndCount(m.duration); n != 2 {
		t.Errorf("%d duration series, want 2", n)
	}
	if n := testutil.CollectAndCount(m.lateness); n != 1 {
		t.Errorf("%d lateness series", n)
	}
	if a := testing.AllocsPerRun(1000, func() {
		m.Handled("Echo", grain.KindRequest, codes.OK, time.Millisecond)
		m.Refused("Echo", grain.KindRequest, codes.InvalidArgument)
	}); a != 0 {
		t.Errorf("%v allocations per observation", a)
	}
}

// BenchmarkObserve is the cost of one observation of a handled message.
func BenchmarkObserve(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Handled("Echo", grain.KindRequest, codes.OK, time.Millisecond)
		}
	})
}

// BenchmarkAskMetrics is grain's BenchmarkAsk with the silo's metrics as
// the runtime's Observer: a local Ask round trip to 1,000 live agents, with
// the Prometheus counters and histograms of the call path.
func BenchmarkAskMetrics(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	reg := grain.NewRegistry()
	err = reg.Register("Echo", func(grain.Host) (grain.Agent, error) {
		return agentFunc(func(_ context.Context, msg *grain.Message) (*grain.Message, error) {
			r := msg.Response()
			r.Message = msg.Message
			return r, nil
		}), nil
	})
	if err != nil {
		b.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.Observer = m
	cfg.Logger = slog.New(slog.DiscardHandler)
	rt, err := grain.New(cfg, reg)
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
		if _, err := rt.Ask(context.Background(), &grain.Message{To: addrs[i], From: "Session:bench:s"}); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(97))
		ctx := context.Background()
		for pb.Next() {
			i++
			if _, err := rt.Ask(ctx, &grain.Message{To: addrs[i%len(addrs)], From: "Session:bench:s", Message: "x"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
