package cluster

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/llm"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The silo's Prometheus metrics. Each silo has its own registry
// (SiloConfig.Metrics), served at /metrics on its HTTP address, so that
// several silos in one process do not collide.
//
// Counters and histograms of the call path are updated through
// grain.Observer: label values are resolved once per agent type, kind and
// code, then cached, so an observation costs a map read, an atomic load and
// the counter's own atomic add; nothing is allocated. What can be read when
// scraped (activations, mailboxes, the view, reminders fired) is read then,
// by siloCollector, and costs nothing between scrapes.

// unregisteredType labels messages refused for a type that is not
// registered: the type named by a caller is not used as a label value, so
// callers cannot mint series.
const unregisteredType = "(unregistered)"

// Buckets of agentsilo_call_duration_seconds: from a local turn (tens of
// microseconds) to an agent waiting on a model for a minute.
var callBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Buckets of agentsilo_reminder_lateness_seconds: a tick is normally late by
// the scheduler's reaction time; one caught up after an outage or a
// take-over is late by up to its period.
var latenessBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}

const (
	numKinds = int(agentsilov1.Kind_KIND_RESPONSE) + 1
	numCodes = int(codes.Unauthenticated) + 1
)

// kindLabels are the kind label's values, by Kind.
var kindLabels = [numKinds]string{"UNSPECIFIED", "REQUEST", "ONE_WAY", "EVENT", "RESPONSE"}

// metrics is a silo's metrics of the hot paths. It implements
// grain.Observer.
type metrics struct {
	calls      *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	aclDenials *prometheus.CounterVec
	lateness   prometheus.Histogram
	// llm counts the model and tool calls of the silo's model agents
	// (agentsilo_llm_*), one collector for every type (llmOption).
	llm *llm.Metrics

	mu       sync.Mutex                              // serialises writers of types
	types    atomic.Pointer[map[string]*typeMetrics] // copy on write: types are few
	deniedBy [16]atomic.Pointer[counterRef]          // by acl.Permission
}

// typeMetrics caches the label-resolved series of one agent type.
type typeMetrics struct {
	typ      string
	calls    [numKinds][numCodes]atomic.Pointer[counterRef]
	duration [numKinds]atomic.Pointer[observerRef]
}

type counterRef struct{ prometheus.Counter }
type observerRef struct{ prometheus.Observer }

var _ grain.Observer = (*metrics)(nil)

// registerer is where a silo registers its collectors: its collectorSet.
type registerer interface {
	Register(prometheus.Collector) error
}

// collectorSet registers a silo's collectors in its registry and takes
// them all out again when the silo closes, so that the silos a program
// runs one after another (after a fence) share the program's registry.
type collectorSet struct {
	reg *prometheus.Registry
	mu  sync.Mutex
	cs  []prometheus.Collector
}

// Register implements registerer.
func (c *collectorSet) Register(col prometheus.Collector) error {
	if err := c.reg.Register(col); err != nil {
		return err
	}
	c.mu.Lock()
	c.cs = append(c.cs, col)
	c.mu.Unlock()
	return nil
}

// unregisterAll takes every collector registered out of the registry.
func (c *collectorSet) unregisterAll() {
	c.mu.Lock()
	cs := c.cs
	c.cs = nil
	c.mu.Unlock()
	for _, col := range cs {
		c.reg.Unregister(col)
	}
}

// newMetrics creates the hot-path metrics and registers them in reg.
func newMetrics(reg registerer) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentsilo_calls_total",
			Help: "Messages handled by agents on this silo, or refused before an agent handled them, by agent type, kind and gRPC code.",
		}, []string{"type", "kind", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentsilo_call_duration_seconds",
			Help:    "Time agents on this silo spent handling a message, by agent type and kind.",
			Buckets: callBuckets,
		}, []string{"type", "kind"}),
		aclDenials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentsilo_acl_denials_total",
			Help: "Client calls refused by the ACL on this silo, by the permission missing.",
		}, []string{"permission"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agentsilo_reminder_lateness_seconds",
			Help:    "How late reminder ticks fired on this silo after their due time.",
			Buckets: latenessBuckets,
		}),
		llm: llm.NewMetrics(),
	}
	empty := map[string]*typeMetrics{}
	m.types.Store(&empty)
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "agentsilo_build_info",
		Help: "1, labelled with the version of agentsilo this silo runs (see silo --version) and the Go version.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(Version(), runtime.Version()).Set(1)
	for _, c := range []prometheus.Collector{m.calls, m.duration, m.aclDenials, m.lateness, build, m.llm} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// llmOption makes the model agent types built with it count their model
// and tool calls in the silo's metrics.
func (m *metrics) llmOption() llm.Option { return llm.WithMetrics(m.llm) }

// forType returns the cache of typ's series, creating it on first use.
func (m *metrics) forType(typ string) *typeMetrics {
	if t := (*m.types.Load())[typ]; t != nil {
		return t
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.types.Load()
	if t := cur[typ]; t != nil {
		return t
	}
	next := make(map[string]*typeMetrics, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	t := &typeMetrics{typ: typ}
	next[typ] = t
	m.types.Store(&next)
	return t
}

// kindIndex is kind's index in the caches, 0 (UNSPECIFIED) if unknown.
func kindIndex(kind grain.Kind) int {
	if k := int(kind); k > 0 && k < numKinds {
		return k
	}
	return 0
}

// count increments typ's calls of kind k ending with code. Two racing
// first uses may both resolve the series: the same one, so either is fine.
func (m *metrics) count(t *typeMetrics, k int, code codes.Code) {
	c := int(code)
	if c < 0 || c >= numCodes {
		c = int(codes.Unknown)
	}
	r := t.calls[k][c].Load()
	if r == nil {
		r = &counterRef{m.calls.WithLabelValues(t.typ, kindLabels[k], codes.Code(c).String())}
		t.calls[k][c].Store(r)
	}
	r.Inc()
}

// Handled implements grain.Observer.
func (m *metrics) Handled(typ string, kind grain.Kind, code codes.Code, d time.Duration) {
	t, k := m.forType(typ), kindIndex(kind)
	m.count(t, k, code)
	r := t.duration[k].Load()
	if r == nil {
		r = &observerRef{m.duration.WithLabelValues(typ, kindLabels[k])}
		t.duration[k].Store(r)
	}
	r.Observe(d.Seconds())
}

// Refused implements grain.Observer.
func (m *metrics) Refused(typ string, kind grain.Kind, code codes.Code) {
	if typ == "" {
		typ = unregisteredType
	}
	m.count(m.forType(typ), kindIndex(kind), code)
}

// denied counts a call the ACL refused for lack of need.
func (m *metrics) denied(need acl.Permission) {
	i := int(need) & 15
	r := m.deniedBy[i].Load()
	if r == nil {
		r = &counterRef{m.aclDenials.WithLabelValues(need.String())}
		m.deniedBy[i].Store(r)
	}
	r.Inc()
}

// observeLateness records how late a reminder tick fired.
func (m *metrics) observeLateness(late time.Duration) { m.lateness.Observe(max(late, 0).Seconds()) }

// siloCollector reads, when scraped, what the silo knows anyway: live
// activations and their mailboxes, the membership view, reminders fired.
type siloCollector struct {
	s *Silo

	activations, queued, maxQueued *prometheus.Desc
	members, version, fired        *prometheus.Desc
	bucketsLoaded                  *prometheus.Desc
	suspended                      *prometheus.Desc
	batches, envelopes, maxBatch   *prometheus.Desc
}

func newSiloCollector(s *Silo) *siloCollector {
	return &siloCollector{
		s:           s,
		activations: prometheus.NewDesc("agentsilo_activations", "Live activations on this silo, by agent type.", []string{"type"}, nil),
		queued:      prometheus.NewDesc("agentsilo_mailbox_depth", "Messages waiting in the mailboxes of this silo's activations, by agent type.", []string{"type"}, nil),
		maxQueued:   prometheus.NewDesc("agentsilo_mailbox_depth_max", "The most messages waiting in one mailbox of an activation of the type.", []string{"type"}, nil),
		members:     prometheus.NewDesc("agentsilo_view_members", "Silos in this silo's membership view.", nil, nil),
		version:     prometheus.NewDesc("agentsilo_view_version", "The version (etcd revision) of this silo's membership view.", nil, nil),
		fired:       prometheus.NewDesc("agentsilo_reminders_fired_total", "Reminder ticks this silo fired (handed for delivery).", nil, nil),
		bucketsLoaded: prometheus.NewDesc("agentsilo_reminder_buckets_loaded_total",
			"Reminder buckets this silo took over, by where it read them: from the silo that held them (peer) or from etcd.", []string{"from"}, nil),
		suspended: prometheus.NewDesc("agentsilo_suspended", "1 while this silo is suspended: no lease renewal succeeded within its fence bound, so its turns wait.", nil, nil),
		batches:   prometheus.NewDesc("agentsilo_peer_batches_total", "Stream messages carrying envelopes this silo wrote to its peers (requests on its own streams, replies on theirs).", nil, nil),
		envelopes: prometheus.NewDesc("agentsilo_peer_envelopes_total", "Envelopes (messages, replies, cancels) in those stream messages.", nil, nil),
		maxBatch:  prometheus.NewDesc("agentsilo_peer_batch_max", "The most envelopes one of those stream messages carried.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *siloCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.activations, c.queued, c.maxQueued, c.members, c.version, c.fired, c.bucketsLoaded, c.suspended, c.batches, c.envelopes, c.maxBatch} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It is called concurrently, by
// scrapes, only once the silo has started (it is registered at the end of
// Start).
func (c *siloCollector) Collect(ch chan<- prometheus.Metric) {
	for _, a := range c.s.rt.CountActivations() {
		constMetric(ch, c.activations, prometheus.GaugeValue, float64(a.Activations), a.Type)
		constMetric(ch, c.queued, prometheus.GaugeValue, float64(a.Queued), a.Type)
		constMetric(ch, c.maxQueued, prometheus.GaugeValue, float64(a.MaxQueued), a.Type)
	}
	v := c.s.router.state.Load().view
	constMetric(ch, c.members, prometheus.GaugeValue, float64(len(v.Members)))
	constMetric(ch, c.version, prometheus.GaugeValue, float64(v.Version))
	rs := c.s.reminders.Stats()
	constMetric(ch, c.fired, prometheus.CounterValue, float64(rs.Fired))
	constMetric(ch, c.bucketsLoaded, prometheus.CounterValue, float64(rs.Fetched), "peer")
	constMetric(ch, c.bucketsLoaded, prometheus.CounterValue, float64(rs.Read), "etcd")
	suspended := 0.0
	if c.s.members.Suspended() {
		suspended = 1
	}
	constMetric(ch, c.suspended, prometheus.GaugeValue, suspended)
	ts := c.s.tp.Stats()
	constMetric(ch, c.batches, prometheus.CounterValue, float64(ts.Batches))
	constMetric(ch, c.envelopes, prometheus.CounterValue, float64(ts.Envelopes))
	constMetric(ch, c.maxBatch, prometheus.GaugeValue, float64(ts.MaxBatch))
}

// constMetric sends a metric read at scrape time; one that cannot be made
// is sent as invalid, so the scrape reports the error.
func constMetric(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

// registerRuntimeCollectors adds the Go runtime's and the process's
// standard metrics (go_*, process_*) to reg.
func registerRuntimeCollectors(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// teeObserver returns an Observer that tells both m and o, or m alone if o
// is nil.
func teeObserver(m *metrics, o grain.Observer) grain.Observer {
	if o == nil {
		return m
	}
	return tee{m, o}
}

type tee struct{ a, b grain.Observer }

func (t tee) Handled(typ string, kind grain.Kind, code codes.Code, d time.Duration) {
	t.a.Handled(typ, kind, code, d)
	t.b.Handled(typ, kind, code, d)
}

func (t tee) Refused(typ string, kind grain.Kind, code codes.Code) {
	t.a.Refused(typ, kind, code)
	t.b.Refused(typ, kind, code)
}
