package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// membersGateway answers ListMembers with fixed names.
type membersGateway struct {
	agentsilov1.GatewayClient
	names []string
}

func (g membersGateway) ListMembers(context.Context, *agentsilov1.ListMembersRequest, ...grpc.CallOption) (*agentsilov1.ListMembersResponse, error) {
	var ms []*agentsilov1.Member
	for _, n := range g.names {
		ms = append(ms, &agentsilov1.Member{Name: n})
	}
	return &agentsilov1.ListMembersResponse{Members: ms}, nil
}

// loadSilo is a dashboard of silo name on etcd, whose metrics say it
// holds activations.
func loadSilo(t *testing.T, cli *clientv3.Client, name string, activations float64) *Dashboard {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentsilo_activations"})
	g.Set(activations)
	reg.MustRegister(g)
	d, err := New(Config{Silo: name, Conn: noConn{}, Metrics: reg, Etcd: cli, Prefix: "/load/", SampleEvery: time.Hour, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	d.gw = membersGateway{names: []string{"s0", "s1"}}
	testutil.WaitFor(t, name+"'s first sample", func() bool { return len(d.series.snapshot()) == 1 })
	return d
}

// Each silo's samples reach the charts of another while they are
// watched, through etcd; nothing is published while nobody watches, and
// what was goes when the watching ends.
func TestClusterCharts(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	ctx := t.Context()
	d0, d1 := loadSilo(t, cli, "s0", 3), loadSilo(t, cli, "s1", 7)
	published := func() int {
		resp, err := cli.Get(ctx, "/load/"+loadDir, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(resp.Count)
	}
	if n := published(); n != 0 {
		t.Fatalf("%d silos published with nobody watching", n)
	}
	// s0's charts are fetched: s1 publishes, s0 draws both.
	var v clusterSeries
	testutil.WaitFor(t, "s1's samples on s0's charts", func() bool {
		v = d0.clusterLoad(ctx)
		return len(v.Silos) == 2 && v.Silos[1].Silo == "s1" && len(v.T) > 0 && v.Silos[1].Activations[len(v.T)-1] != nil
	})
	if a := v.Silos[0].Activations; v.Silos[0].Silo != "s0" || a[len(a)-1] == nil || *a[len(a)-1] != 3 {
		t.Errorf("s0's series %+v", v.Silos[0])
	}
	if a := v.Silos[1].Activations; *a[len(a)-1] != 7 {
		t.Errorf("s1's series %+v", v.Silos[1])
	}
	// Nobody watches any more (the lease ends as it would 60 s after the
	// last fetch): the samples are gone and publishing stops.
	d0.load.mu.Lock()
	lease := d0.load.mine
	d0.load.mu.Unlock()
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "s1 sees nobody watching", func() bool { return d1.load.lease.Load() == 0 })
	if n := published(); n != 0 {
		t.Errorf("%d silos' samples left after the watching ended", n)
	}
}

// Samples taken at different moments share slots of the axis.
func TestAlign(t *testing.T) {
	v := align("a", 5, []string{"a", "b", "gone"}, map[string][]point{
		"a": {{At: 100, Activations: 1}, {At: 105, Activations: 2}},
		"b": {{At: 103, Activations: 5}, {At: 111, Activations: 6}},
	}, nil)
	if len(v.T) != 3 || v.T[0] != 100 || v.T[1] != 105 || v.T[2] != 110 {
		t.Fatalf("axis %v", v.T)
	}
	show := func(xs []*float64) []any {
		var out []any
		for _, x := range xs {
			if x == nil {
				out = append(out, nil)
			} else {
				out = append(out, *x)
			}
		}
		return out
	}
	for i, want := range [][]any{{1.0, 2.0, nil}, {5.0, nil, 6.0}, {nil, nil, nil}} {
		got := show(v.Silos[i].Activations)
		for j := range want {
			if got[j] != want[j] {
				t.Errorf("%s: %v, want %v", v.Silos[i].Silo, got, want)
				break
			}
		}
	}
}
