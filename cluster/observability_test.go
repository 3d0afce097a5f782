package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// scrape GETs /metrics of s and parses it.
func scrape(t *testing.T, s *Silo) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.HTTPAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value returns the value of the series of name whose labels include
// labels (name=value pairs), summed over the series that match: a
// counter's or gauge's value, a histogram's count. ok is false if none
// matches.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, ok
}

// ticker is an agent that registers a reminder when asked and counts its
// ticks.
type ticker struct {
	h     grain.Host
	ticks *atomic.Int64
}

func (a *ticker) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.MessageType == "tick" {
		a.ticks.Add(1)
		return nil, nil
	}
	if err := a.h.RegisterReminder(ctx, "r", 200*time.Millisecond, 200*time.Millisecond, "tick", ""); err != nil {
		return nil, err
	}
	return m.Response(), nil
}

// Two silos serve /metrics: the calls they handled and refused, their
// activations, their views, reminder ticks and ACL denials.
func TestMetrics(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	var ticks atomic.Int64
	configure := func(cfg *SiloConfig, reg *grain.Registry) {
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.MinReminderPeriod = 100 * time.Millisecond
		if err := reg.Register("Ticker", func(h grain.Host) (grain.Agent, error) { return &ticker{h: h, ticks: &ticks}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	s1, s2 := c.startWith("s1", configure), c.startWith("s2", configure)
	c.waitView("s1", "s2")
	silos := []*Silo{s1, s2}

	const n = 20
	for i := range n {
		if _, err := ask(t.Context(), s1, fmt.Sprintf("Probe:test:a%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ask(t.Context(), s1, "Nope:test:x"); errs.Code(err) != codes.NotFound {
		t.Fatalf("unknown type: %v", err)
	}

	fams := []map[string]*dto.MetricFamily{scrape(t, s1), scrape(t, s2)}
	var ok, activations, durations float64
	for i, s := range silos {
		// The view gauges are the silo's view when scraped. The view may
		// still move (a record rewritten after a join), so the scrape is
		// taken again until it matches the view around it.
		waitFor(t, s.cfg.Name+"'s view gauges", func() bool {
			before := s.router.state.Load().view
			f := scrape(t, s)
			after := s.router.state.Load().view
			members, _ := value(f, "agentsilo_view_members")
			version, _ := value(f, "agentsilo_view_version")
			return before.Version == after.Version && members == float64(len(after.Members)) && version == float64(after.Version)
		})
		if v := s.router.state.Load().view; len(v.Members) != 2 {
			t.Errorf("%s: view %v, want 2 members", s.cfg.Name, v.Names())
		}
		x, _ := value(fams[i], "agentsilo_calls_total", "type", "Probe", "kind", "REQUEST", "code", "OK")
		ok += x
		x, _ = value(fams[i], "agentsilo_activations", "type", "Probe")
		activations += x
		x, _ = value(fams[i], "agentsilo_call_duration_seconds", "type", "Probe", "kind", "REQUEST")
		durations += x
		if x, found := value(fams[i], "agentsilo_suspended"); !found || x != 0 {
			t.Errorf("%s: agentsilo_suspended = %v (found %t), want 0", s.cfg.Name, x, found)
		}
		if _, found := value(fams[i], "go_goroutines"); !found {
			t.Errorf("%s: no Go runtime metrics", s.cfg.Name)
		}
		if x, _ := value(fams[i], "agentsilo_build_info", "version", Version(), "goversion", runtime.Version()); x != 1 {
			t.Errorf("%s: agentsilo_build_info{version=%q} = %v, want 1", s.cfg.Name, Version(), x)
		}
	}
	if ok != n || activations != n || durations != n {
		t.Errorf("across the silos: %v calls OK, %v activations, %v durations; want %d each", ok, activations, durations, n)
	}
	// The Asks s1 sent to agents s2 hosts went out on s1's stream to s2,
	// their replies on the same stream from s2: each silo wrote at least
	// that many envelopes, in at least one stream message.
	remote, _ := value(fams[1], "agentsilo_activations", "type", "Probe")
	for i, s := range silos {
		env, _ := value(fams[i], "agentsilo_peer_envelopes_total")
		batches, _ := value(fams[i], "agentsilo_peer_batches_total")
		most, _ := value(fams[i], "agentsilo_peer_batch_max")
		if env < remote || batches > env || most > env || (remote > 0 && (batches < 1 || most < 1)) {
			t.Errorf("%s: %v envelopes in %v stream messages (at most %v in one); %v Asks crossed", s.cfg.Name, env, batches, most, remote)
		}
	}
	if got, _ := value(fams[0], "agentsilo_calls_total", "type", unregisteredType, "code", "NotFound"); got != 1 {
		t.Errorf("s1: NotFound calls = %v, want 1", got)
	}
	if _, found := value(fams[1], "agentsilo_calls_total", "code", "NotFound"); found {
		t.Errorf("s2 counted the NotFound call s1 refused")
	}
	if _, found := value(fams[0], "agentsilo_mailbox_depth", "type", "Probe"); !found {
		t.Errorf("no agentsilo_mailbox_depth")
	}

	// A reminder tick counts on the silo that fired it.
	if _, err := ask(t.Context(), s2, "Ticker:test:t"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a reminder tick", func() bool { return ticks.Load() >= 1 })
	var fired, late float64
	for _, s := range silos {
		f := scrape(t, s)
		x, _ := value(f, "agentsilo_reminders_fired_total")
		fired += x
		x, _ = value(f, "agentsilo_reminder_lateness_seconds")
		late += x
	}
	if fired < 1 || late < 1 {
		t.Errorf("after a tick: reminders fired %v, lateness observations %v", fired, late)
	}
	// s1 started alone and read its reminder buckets from etcd; s2 joined
	// and took its share from s1.
	if x, _ := value(scrape(t, s1), "agentsilo_reminder_buckets_loaded_total", "from", "etcd"); x < 1 {
		t.Errorf("s1 read %v reminder buckets from etcd, want its first view's", x)
	}
	if x, _ := value(scrape(t, s2), "agentsilo_reminder_buckets_loaded_total", "from", "peer"); x < 1 {
		t.Errorf("s2 took %v reminder buckets from s1, want its share", x)
	}

	// An ACL denial, through the gateway: with no rules, only system's
	// agents are open to other principals.
	cl, err := client.Dial(t.Context(), []string{s1.GatewayAddr()}, client.WithPrincipal("bob"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Ask(t.Context(), "Probe:alice:x", nil); errs.Code(err) != codes.PermissionDenied {
		t.Fatalf("bob asks alice's agent: %v, want PermissionDenied", err)
	}
	if got, _ := value(scrape(t, s1), "agentsilo_acl_denials_total", "permission", "Message"); got != 1 {
		t.Errorf("agentsilo_acl_denials_total{permission=Message} = %v, want 1", got)
	}
}

// recordingHandler keeps the records logged through it.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// attrsOf returns the attributes of the records with message msg.
func (h *recordingHandler) attrsOf(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.records {
		if r.Message != msg {
			continue
		}
		m := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	return out
}

// One trace from the SDK through the gateway of s1 to agent A on s1, and
// from A to agent B on s2: every span shares the caller's trace id, each
// hop is the child of the one before, B sees the trace in its message, and
// B's log record carries the trace id.
func TestTraceAcrossSilos(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	rec, tp, stopTracing := spanRecorder(t)
	defer stopTracing()
	c := newTestCluster(t)
	defer c.close()

	// A on s1 and B on s2: aliases chosen by their owners in the view.
	names := []string{"s1", "s2"}
	pick := func(typ, silo string) string {
		for i := 0; ; i++ {
			a := fmt.Sprintf("%s:alice:x%d", typ, i)
			if Owner(a, names) == silo {
				return a
			}
		}
	}
	front, back := pick("Front", "s1"), pick("Back", "s2")
	var backSaw atomic.Value
	logs := new(recordingHandler)
	configure := func(cfg *SiloConfig, reg *grain.Registry) {
		cfg.TracerProvider = tp
		cfg.Logger = slog.New(logs)
		err := reg.Register("Front", func(h grain.Host) (grain.Agent, error) {
			return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
				if _, err := h.Ask(ctx, back, grain.Text("on")); err != nil {
					return nil, err
				}
				return m.Response(), nil
			}), nil
		})
		if err == nil {
			err = reg.Register("Back", func(h grain.Host) (grain.Agent, error) {
				return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
					backSaw.Store(m.Traceparent())
					h.Logger().InfoContext(ctx, "back handled")
					return m.Response(), nil
				}), nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	s1 := c.startWith("s1", configure)
	c.startWith("s2", configure)
	c.waitView("s1", "s2")

	cl, err := client.Dial(t.Context(), []string{s1.GatewayAddr()}, client.WithPrincipal("alice"), client.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, root := tp.Tracer("test").Start(t.Context(), "root")
	if _, err := cl.Ask(ctx, front, grain.Text("go")); err != nil {
		t.Fatal(err)
	}
	root.End()
	traceID := root.SpanContext().TraceID()

	// Every span ended before the reply it belongs to was sent.
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %q in trace %s, want %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
		if s.Name() == "forward Ask" && !hasAttr(s, "agentsilo.to", back) {
			continue // Front itself is local to s1: only B's message is forwarded
		}
		if s.Name() == "turn Ask" && !hasAttr(s, "agentsilo.agent", front) {
			continue // B's turn is under the peer span (agent_trace_test.go)
		}
		byName[s.Name()] = s
	}
	chain := []string{"root", "agentsilo Ask", "gateway Ask", "turn Ask", "call Ask", "forward Ask", "peer Ask"}
	for i, name := range chain {
		s, found := byName[name]
		if !found {
			t.Fatalf("no span %q; spans: %v", name, spanNames(rec.Ended()))
		}
		if i > 0 && s.Parent().SpanID() != byName[chain[i-1]].SpanContext().SpanID() {
			t.Errorf("span %q is not the child of %q", name, chain[i-1])
		}
	}
	if k := byName["gateway Ask"].SpanKind(); k != trace.SpanKindServer {
		t.Errorf("gateway span kind %v", k)
	}
	tp0, _ := backSaw.Load().(string)
	if tid, _, ok := parseTraceparent(tp0); !ok || tid != traceID.String() {
		t.Errorf("B's message carries traceparent %q, not trace %s", tp0, traceID)
	}
	recs := logs.attrsOf("back handled")
	if len(recs) != 1 || recs[0]["trace_id"] != traceID.String() || recs[0]["span_id"] == "" {
		t.Errorf("B's log records: %v, want trace_id %s", recs, traceID)
	}
}

func hasAttr(s sdktrace.ReadOnlySpan, key, value string) bool {
	for _, a := range s.Attributes() {
		if a.Key == attribute.Key(key) && a.Value.AsString() == value {
			return true
		}
	}
	return false
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}
