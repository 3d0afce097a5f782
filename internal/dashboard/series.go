package dashboard

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// series keeps the charts' last samples of this silo's metrics in a ring.
type series struct {
	mu     sync.Mutex
	n      int
	points []point
	// The previous sample's totals, for rates and the latency quantiles
	// of the interval between samples.
	prevAt    time.Time
	prevCalls float64
	prevHist  []bucket
}

type point struct {
	At          int64   `json:"t"` // Unix seconds
	Activations float64 `json:"activations"`
	Rate        float64 `json:"rate"` // messages handled per second
	P50         float64 `json:"p50"`  // Ask latency, milliseconds
	P99         float64 `json:"p99"`
}

type bucket struct {
	le    float64
	count float64
}

func newSeries(n int) *series { return &series{n: n} }

// sample adds a point every SampleEvery until ctx ends, and publishes
// the samples while the charts are watched (load.go).
func (d *Dashboard) sample(ctx context.Context) {
	defer d.done.Done()
	t := time.NewTicker(d.cfg.SampleEvery)
	defer t.Stop()
	d.sampleOnce()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.sampleOnce()
			if d.cfg.Etcd != nil {
				d.publish(ctx)
			}
		case <-d.load.kick:
			d.publish(ctx)
		}
	}
}

func (d *Dashboard) sampleOnce() {
	mfs, err := d.cfg.Metrics.Gather()
	if err != nil && len(mfs) == 0 {
		return
	}
	d.series.add(d.cfg.Now(), mfs)
}

// add reads one sample out of gathered metric families.
func (s *series) add(now time.Time, mfs []*dto.MetricFamily) {
	var act, calls float64
	var hist []bucket
	for _, mf := range mfs {
		switch mf.GetName() {
		case "agentsilo_activations":
			for _, m := range mf.GetMetric() {
				act += m.GetGauge().GetValue()
			}
		case "agentsilo_calls_total":
			for _, m := range mf.GetMetric() {
				calls += m.GetCounter().GetValue()
			}
		case "agentsilo_call_duration_seconds":
			for _, m := range mf.GetMetric() {
				if label(m, "kind") != "REQUEST" {
					continue
				}
				hist = addBuckets(hist, m.GetHistogram())
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := point{At: now.Unix(), Activations: act}
	if !s.prevAt.IsZero() {
		if dt := now.Sub(s.prevAt).Seconds(); dt > 0 {
			p.Rate = math.Max(0, calls-s.prevCalls) / dt
		}
		delta := diff(hist, s.prevHist)
		p.P50, p.P99 = quantile(delta, 0.5)*1000, quantile(delta, 0.99)*1000
	}
	s.prevAt, s.prevCalls, s.prevHist = now, calls, hist
	s.points = append(s.points, p)
	if len(s.points) > s.n {
		s.points = append(s.points[:0], s.points[len(s.points)-s.n:]...)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// addBuckets adds h's cumulative buckets to acc (same bounds for every
// series of one histogram).
func addBuckets(acc []bucket, h *dto.Histogram) []bucket {
	bs := h.GetBucket()
	if acc == nil {
		acc = make([]bucket, len(bs))
		for i, b := range bs {
			acc[i].le = b.GetUpperBound()
		}
	}
	for i, b := range bs {
		if i < len(acc) {
			acc[i].count += float64(b.GetCumulativeCount())
		}
	}
	return acc
}

// diff is cur minus prev, bucket by bucket.
func diff(cur, prev []bucket) []bucket {
	out := make([]bucket, len(cur))
	for i, b := range cur {
		out[i] = b
		if i < len(prev) {
			out[i].count -= prev[i].count
		}
	}
	return out
}

// quantile estimates the q quantile of cumulative buckets by linear
// interpolation within the bucket holding it; 0 without observations.
func quantile(bs []bucket, q float64) float64 {
	if len(bs) == 0 || bs[len(bs)-1].count <= 0 {
		return 0
	}
	rank := q * bs[len(bs)-1].count
	i := sort.Search(len(bs), func(i int) bool { return bs[i].count >= rank })
	if i >= len(bs) {
		return bs[len(bs)-1].le
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = bs[i-1].le, bs[i-1].count
	}
	in := bs[i].count - below
	if in <= 0 {
		return bs[i].le
	}
	return lo + (bs[i].le-lo)*(rank-below)/in
}

func (s *series) snapshot() []point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]point(nil), s.points...)
}

// seriesJSON answers the charts: every member's samples (load.go).
func (d *Dashboard) seriesJSON(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	v := d.clusterLoad(s.ctx(ctx))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// etcdStatus is one etcd endpoint's health.
type etcdStatus struct {
	Endpoint string
	OK       bool
	Detail   string
}

// etcdHealth asks each etcd endpoint for its status.
func (d *Dashboard) etcdHealth(ctx context.Context) []etcdStatus {
	if d.cfg.Etcd == nil {
		return nil
	}
	ctx = noMetadata(ctx)
	var out []etcdStatus
	for _, ep := range d.cfg.Etcd.Endpoints() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := d.cfg.Etcd.Status(cctx, ep)
		cancel()
		if err != nil {
			out = append(out, etcdStatus{Endpoint: ep, Detail: err.Error()})
			continue
		}
		role := "follower"
		if st.Header.GetMemberId() == st.Leader {
			role = "leader"
		}
		out = append(out, etcdStatus{Endpoint: ep, OK: true, Detail: "v" + st.Version + ", " + role + ", raft index " + itoa(st.RaftIndex) + ", db " + itoa(uint64(st.DbSize)>>10) + " KiB"})
	}
	return out
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
