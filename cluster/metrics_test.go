package cluster

import (
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
