package dashboard

import (
	"context"
	"encoding/json"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/internal/etcdwatch"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The cluster-wide charts. Each silo's dashboard samples its own metrics
// (series.go) whether or not anyone looks. While somebody watches the
// charts on any silo, every silo also publishes its samples in etcd,
// where the silo serving the page reads them:
//
//	<prefix>dashboard/watched      put by a silo whose charts are fetched, on a lease of
//	                               watchTTL, renewed and put again every watchRenew while
//	                               they are; it goes away soon after the last page closes
//	<prefix>dashboard/load/<silo>  a silo's last samples, put on each sample while the
//	                               watched key exists, on that key's lease: they go with it
//
// So an idle cluster writes nothing for the charts, a watched one one
// small value per silo per sample, and the charts need no address of the
// other silos' HTTP ports, nor a login there.
const (
	watchedKey = "dashboard/watched"
	loadDir    = "dashboard/load/"
	watchTTL   = 60 // seconds
	watchRenew = 20 * time.Second
)

// loadState is a dashboard's part in the cluster-wide charts.
type loadState struct {
	// lease is the watched key's lease while it exists, else 0: the
	// samples are published on it.
	lease atomic.Int64
	// kick asks the sampler to publish at once (someone began watching).
	kick chan struct{}

	mu     sync.Mutex // the marker's, held across its etcd calls
	mine   clientv3.LeaseID
	marked time.Time
}

// watch follows the watched key until ctx ends, keeping load.lease.
func (d *Dashboard) watch(ctx context.Context) {
	defer d.done.Done()
	w := etcdwatch.Follower{
		Client: d.cfg.Etcd,
		Key:    d.cfg.Prefix + watchedKey,
		What:   "dashboard: read the watched key",
		Load: func(kvs []*mvccpb.KeyValue, _ int64) error {
			var lease int64
			if len(kvs) > 0 {
				lease = kvs[0].Lease
			}
			d.setWatched(lease)
			return nil
		},
		Events: func(evs []*clientv3.Event, _ int64) {
			for _, ev := range evs {
				if ev.Type == clientv3.EventTypeDelete {
					d.setWatched(0)
				} else {
					d.setWatched(ev.Kv.Lease)
				}
			}
		},
		// Until the key is read again, nothing is published.
		Failed: func(error) { d.load.lease.Store(0) },
	}
	w.Run(ctx)
	d.load.lease.Store(0)
}

// setWatched takes the watched key's lease (0: nobody watches); a new one
// has the sampler publish at once.
func (d *Dashboard) setWatched(lease int64) {
	if old := d.load.lease.Swap(lease); old == 0 && lease != 0 {
		select {
		case d.load.kick <- struct{}{}:
		default:
		}
	}
}

// publish puts the silo's samples in etcd while somebody watches.
func (d *Dashboard) publish(ctx context.Context) {
	lease := d.load.lease.Load()
	if lease == 0 {
		return
	}
	b, err := json.Marshal(compact(d.series.snapshot()))
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := d.cfg.Etcd.Put(ctx, d.cfg.Prefix+loadDir+url.PathEscape(d.cfg.Silo), string(b), clientv3.WithLease(clientv3.LeaseID(lease))); err != nil {
		d.cfg.Logger.Debug("dashboard: publishing the charts' samples", "err", err)
	}
}

// markWatched says in etcd that this silo's charts are watched: at most
// once every watchRenew, it renews its lease (or grants one) and puts the
// watched key on it.
func (d *Dashboard) markWatched(ctx context.Context) {
	l := &d.load
	l.mu.Lock()
	defer l.mu.Unlock()
	now := d.cfg.Now()
	if l.mine != 0 && now.Sub(l.marked) < watchRenew {
		return
	}
	ctx, cancel := context.WithTimeout(noMetadata(ctx), 2*time.Second)
	defer cancel()
	if l.mine != 0 {
		if _, err := d.cfg.Etcd.KeepAliveOnce(ctx, l.mine); err != nil {
			l.mine = 0
		}
	}
	if l.mine == 0 {
		g, err := d.cfg.Etcd.Grant(ctx, watchTTL)
		if err != nil {
			d.cfg.Logger.Debug("dashboard: marking the charts watched", "err", err)
			return
		}
		l.mine = g.ID
	}
	// Put again each time: another silo's mark may have taken the key
	// onto a lease that ends sooner.
	if _, err := d.cfg.Etcd.Put(ctx, d.cfg.Prefix+watchedKey, d.cfg.Silo, clientv3.WithLease(l.mine)); err != nil {
		d.cfg.Logger.Debug("dashboard: marking the charts watched", "err", err)
		return
	}
	l.marked = now
}

// compact is a silo's samples as published: [t, activations, rate, p50,
// p99] each, to 4 significant digits.
func compact(points []point) [][5]float64 {
	out := make([][5]float64, len(points))
	for i, p := range points {
		out[i] = [5]float64{float64(p.At), round4(p.Activations), round4(p.Rate), round4(p.P50), round4(p.P99)}
	}
	return out
}

func round4(f float64) float64 {
	if f == 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'g', 4, 64), 64)
	return r
}

func expand(rows [][5]float64) []point {
	out := make([]point, len(rows))
	for i, r := range rows {
		out[i] = point{At: int64(r[0]), Activations: r[1], Rate: r[2], P50: r[3], P99: r[4]}
	}
	return out
}

// clusterSeries is what the charts draw: one time axis, and each silo's
// values on it (null where it has no sample).
type clusterSeries struct {
	Silo  string       `json:"silo"` // the silo serving the page
	Step  int64        `json:"step"` // seconds between samples
	T     []int64      `json:"t"`
	Silos []siloSeries `json:"silos"`
	// Points are the serving silo's own samples, as they were before the
	// charts covered the cluster.
	Points []point `json:"points"`
}

type siloSeries struct {
	Silo        string     `json:"silo"`
	Activations []*float64 `json:"activations"`
	Rate        []*float64 `json:"rate"`
	P50         []*float64 `json:"p50"`
	P99         []*float64 `json:"p99"`
}

// clusterLoad gathers the charts' data: this silo's samples, and every
// other member's from etcd (members in the gateway's order; without etcd
// or a member list, this silo's alone).
func (d *Dashboard) clusterLoad(ctx context.Context) clusterSeries {
	own := d.series.snapshot()
	bySilo := map[string][]point{d.cfg.Silo: own}
	names := []string{d.cfg.Silo}
	if d.cfg.Etcd != nil {
		d.markWatched(ctx)
		if ms, err := d.gw.ListMembers(ctx, &agentsilov1.ListMembersRequest{}); err == nil {
			names = names[:0]
			for _, m := range ms.GetMembers() {
				names = append(names, m.GetName())
			}
			if !slices.Contains(names, d.cfg.Silo) {
				names = append(names, d.cfg.Silo)
			}
		}
		gctx, cancel := context.WithTimeout(noMetadata(ctx), 2*time.Second)
		resp, err := d.cfg.Etcd.Get(gctx, d.cfg.Prefix+loadDir, clientv3.WithPrefix())
		cancel()
		if err == nil {
			for _, kv := range resp.Kvs {
				name, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), d.cfg.Prefix+loadDir))
				if err != nil || name == d.cfg.Silo {
					continue
				}
				var rows [][5]float64
				if json.Unmarshal(kv.Value, &rows) == nil {
					bySilo[name] = expand(rows)
				}
			}
		}
	}
	return align(d.cfg.Silo, int64(max(d.cfg.SampleEvery/time.Second, 1)), names, bySilo, own)
}

// align puts the silos' samples on one time axis of step-second slots
// (each sample in the slot its time falls in), for the silos named, in
// that order.
func align(self string, step int64, names []string, bySilo map[string][]point, own []point) clusterSeries {
	out := clusterSeries{Silo: self, Step: step, Points: own}
	slot := func(t int64) int64 { return t - t%step }
	seen := map[int64]bool{}
	for _, n := range names {
		for _, p := range bySilo[n] {
			if s := slot(p.At); !seen[s] {
				seen[s] = true
				out.T = append(out.T, s)
			}
		}
	}
	slices.Sort(out.T)
	at := make(map[int64]int, len(out.T))
	for i, s := range out.T {
		at[s] = i
	}
	for _, n := range names {
		s := siloSeries{Silo: n, Activations: make([]*float64, len(out.T)), Rate: make([]*float64, len(out.T)), P50: make([]*float64, len(out.T)), P99: make([]*float64, len(out.T))}
		for _, p := range bySilo[n] {
			i := at[slot(p.At)]
			s.Activations[i], s.Rate[i], s.P50[i], s.P99[i] = ptr(p.Activations), ptr(p.Rate), ptr(p.P50), ptr(p.P99)
		}
		out.Silos = append(out.Silos, s)
	}
	return out
}

func ptr(f float64) *float64 { return &f }
