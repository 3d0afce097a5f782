package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/a2a/outside"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// asker is an agent that asks an A2A agent on a client's behalf, with
// the remote's questions asked of it (a2a.questions=ask), and answers
// them from a script: the data of the client's request is
// {"to": ..., "text": ..., "answers": [...], "background": bool}; the
// last answer repeats. It records the questions it was asked and the
// background results it received.
type asker struct {
	h   grain.Host
	log *askerLog
}

type askerLog struct {
	mu        sync.Mutex
	questions []string
	results   []*grain.Message
	answers   []string
	next      int
}

func (l *askerLog) snapshot() (q []string, r []*grain.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.questions), slices.Clone(l.results)
}

type askRequest struct {
	To         string   `json:"to"`
	Text       string   `json:"text"`
	Answers    []string `json:"answers"`
	Background bool     `json:"background"`
}

func (a *asker) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	l := a.log
	switch m.MessageType {
	case a2a.TypeInputRequired:
		l.mu.Lock()
		defer l.mu.Unlock()
		l.questions = append(l.questions, m.Message+"#"+m.State[a2a.StateRound])
		ans := l.answers[min(l.next, len(l.answers)-1)]
		l.next++
		r := m.Response()
		r.Message = ans
		return r, nil
	case a2a.TypeResult:
		l.mu.Lock()
		l.results = append(l.results, m)
		l.mu.Unlock()
		return nil, nil
	}
	var req askRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.answers, l.next = req.Answers, 0
	l.mu.Unlock()
	st := map[string]string{a2a.StateQuestions: a2a.QuestionsAsk}
	if req.Background {
		st = map[string]string{a2a.StateFollow: a2a.FollowBackground}
	}
	return a.h.Ask(ctx, req.To, &grain.Message{Message: req.Text, State: st})
}

// followSilo starts an in-process silo whose A2A type polls fast and
// which has the asker type (logging to log).
func followSilo(t *testing.T, e *etcdtest.Server, name, prefix string, log *askerLog, opts a2a.RemoteOptions) *cluster.Silo {
	t.Helper()
	reg := grain.NewRegistry()
	if err := reg.Register("Asker", func(h grain.Host) (grain.Agent, error) { return &asker{h: h, log: log}, nil }, grain.TypeInfo{}); err != nil {
		t.Fatal(err)
	}
	opts.AllowPrivateNetworks = true
	if opts.PollMin == 0 {
		opts.PollMin, opts.PollMax = 5*time.Millisecond, 20*time.Millisecond
	}
	if err := a2a.RegisterRemote(reg, opts); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = name
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: prefix}
	cfg.Logger = testutil.Logger()
	cfg.MinReminderPeriod = 100 * time.Millisecond
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("close %s: %v", name, err)
		}
	})
	return s
}

func dialSilo(t *testing.T, s *cluster.Silo, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, append([]client.Option{client.WithPrincipal("system")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func askVia(t *testing.T, c *client.Client, asker string, req askRequest) (*client.Message, error) {
	t.Helper()
	b, _ := json.Marshal(req)
	return c.Ask(t.Context(), asker, &client.Message{Data: b, DataType: "application/json"})
}

// A task that is not done when the remote agent first answers is
// followed to its end within the Ask: through the stream (whose updates
// are pushes to the SDK caller) or by polling a remote that does not
// stream. An Ask that ends first cancels the remote task.
func TestLongTaskFollowed(t *testing.T) {
	e := etcdtest.Start(t)
	s := followSilo(t, e, "long", "/long/", &askerLog{}, a2a.RemoteOptions{})
	var mu sync.Mutex
	var pushed []string
	c := dialSilo(t, s, client.WithOnMessage(func(m *client.Message) {
		mu.Lock()
		pushed = append(pushed, m.MessageType+"="+m.Message)
		mu.Unlock()
	}))
	for _, streaming := range []bool{true, false} {
		out := outside.Start(streaming)
		defer out.Close()
		addr := "A2A:system:slow-" + map[bool]string{true: "stream", false: "poll"}[streaming]
		if _, err := c.Agents().Create(t.Context(), addr, map[string]string{a2a.ConfigCardURL: out.CardURL()}); err != nil {
			t.Fatal(err)
		}
		type result struct {
			r   *client.Message
			err error
		}
		done := make(chan result, 1)
		go func() {
			r, err := c.Ask(t.Context(), addr, &client.Message{Message: "slow report"})
			done <- result{r, err}
		}()
		waitFor(t, "the outside task to start", func() bool { return out.Sends() == 1 })
		if streaming {
			waitFor(t, "the progress pushed", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(pushed, a2a.TypeProgress+"=started")
			})
		}
		out.Release()
		res := <-done
		if res.err != nil || res.r.Message != "done: report" || res.r.State[a2a.StateTaskState] != "TASK_STATE_COMPLETED" {
			t.Fatalf("streaming %v: %v %v", streaming, res.r, res.err)
		}

		// An Ask whose deadline comes first cancels the remote task.
		out2 := outside.Start(streaming)
		defer out2.Close()
		if _, err := c.Agents().Create(t.Context(), addr+"-2", map[string]string{a2a.ConfigCardURL: out2.CardURL()}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		pushed = nil
		mu.Unlock()
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			// Once the silo has seen the task (its progress pushed),
			// it knows the task to cancel.
			waitFor(t, "the second task to start", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(pushed, a2a.TypeProgress+"=started")
			})
			cancel()
		}()
		_, err := c.Ask(ctx, addr+"-2", &client.Message{Message: "slow never"})
		if status.Code(err) != codes.Canceled {
			t.Errorf("streaming %v: cancelled Ask: %v", streaming, err)
		}
		waitFor(t, "the remote task cancelled", func() bool { return len(out2.Canceled()) == 1 })
	}
}

// Input-required: a remote task's questions go back to the calling agent,
// whose replies answer them, or (from a client) the reply is the question
// and the next Ask the answer. Loops are cut: the same question answered
// the same way three times, or more than the round limit of questions.
func TestInputRequiredAndLoops(t *testing.T) {
	e := etcdtest.Start(t)
	log := &askerLog{}
	s := followSilo(t, e, "iq", "/iq/", log, a2a.RemoteOptions{})
	c := dialSilo(t, s)
	for _, streaming := range []bool{true, false} {
		mode := map[bool]string{true: "stream", false: "poll"}[streaming]
		out := outside.Start(streaming)
		defer out.Close()
		remote := "A2A:system:q-" + mode
		if _, err := c.Agents().Create(t.Context(), remote, map[string]string{a2a.ConfigCardURL: out.CardURL()}); err != nil {
			t.Fatal(err)
		}

		// Three questions, answered by the calling agent within one Ask.
		r, err := askVia(t, c, "Asker:system:a-"+mode, askRequest{To: remote, Text: "ask 3", Answers: []string{"red", "green", "blue"}})
		if err != nil || r.Message != "answers: red; green; blue" {
			t.Fatalf("%s: three questions: %v %v", mode, r, err)
		}
		q, _ := log.snapshot()
		if want := []string{"question 1 of 3?#1", "question 2 of 3?#2", "question 3 of 3?#3"}; !slices.Equal(q[len(q)-3:], want) {
			t.Errorf("%s: questions asked: %q", mode, q)
		}

		// From a client: the reply is the question; the answer an Ask
		// with its state.
		r, err = c.Ask(t.Context(), remote, &client.Message{Message: "ask 2"})
		for i := 0; err == nil && r.MessageType == a2a.TypeInputRequired; i++ {
			if i > 2 {
				t.Fatalf("%s: more questions than asked", mode)
			}
			r, err = c.Ask(t.Context(), remote, &client.Message{Message: "x" + string(rune('0'+i)), State: r.State})
		}
		if err != nil || r.Message != "answers: x0; x1" {
			t.Fatalf("%s: answered by a client: %v %v", mode, r, err)
		}

		// The same question and answer, forever: cut at the third.
		before := len(out.Canceled())
		_, err = askVia(t, c, "Asker:system:a-"+mode, askRequest{To: remote, Text: "same", Answers: []string{"Bo"}})
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "same answer 3 times in a row") {
			t.Errorf("%s: a repeated exchange: %v", mode, err)
		}
		waitFor(t, "the looping task cancelled", func() bool { return len(out.Canceled()) == before+1 })
		if id := out.Canceled()[before]; out.Turns(id) != 3 {
			t.Errorf("%s: the looping task had %d turns, want 3 (two answers sent)", mode, out.Turns(id))
		}

		// New questions forever: cut after the round limit (20).
		answers := make([]string, 30)
		for i := range answers {
			answers[i] = "answer " + string(rune('a'+i))
		}
		_, err = askVia(t, c, "Asker:system:a-"+mode, askRequest{To: remote, Text: "new", Answers: answers})
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "question 21, over its limit of 20 rounds") {
			t.Errorf("%s: endless new questions: %v", mode, err)
		}
		waitFor(t, "the endless task cancelled", func() bool { return len(out.Canceled()) == before+2 })
		if id := out.Canceled()[before+1]; out.Turns(id) != 21 {
			t.Errorf("%s: the endless task had %d turns, want 21", mode, out.Turns(id))
		}

		// From a client too, with the agent's own limit.
		if _, err := c.Agents().Create(t.Context(), remote+"-low", map[string]string{a2a.ConfigCardURL: out.CardURL(), a2a.ConfigMaxRepeats: "2"}); err != nil {
			t.Fatal(err)
		}
		r, err = c.Ask(t.Context(), remote+"-low", &client.Message{Message: "same"})
		for i := 0; err == nil && r.MessageType == a2a.TypeInputRequired && i < 5; i++ {
			r, err = c.Ask(t.Context(), remote+"-low", &client.Message{Message: "Bo", State: r.State})
		}
		if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, a2a.ErrRepeatedExchange) && !strings.Contains(err.Error(), "2 times in a row") {
			t.Errorf("%s: a client repeating itself: %v", mode, err)
		}
	}
	if _, err := c.Agents().Create(t.Context(), "A2A:system:badcfg", map[string]string{a2a.ConfigCardURL: "http://127.0.0.1:1/", a2a.ConfigMaxRounds: "zero"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ask(t.Context(), "A2A:system:badcfg", &client.Message{Message: "x"}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), a2a.ConfigMaxRounds) {
		t.Errorf("a bad max_rounds: %v", err)
	}
}

// A background follow answers at once with the task's ids and delivers
// the result later to the calling agent, once.
func TestBackgroundFollow(t *testing.T) {
	e := etcdtest.Start(t)
	log := &askerLog{}
	s := followSilo(t, e, "bg", "/bg/", log, a2a.RemoteOptions{})
	c := dialSilo(t, s)
	for _, streaming := range []bool{true, false} {
		mode := map[bool]string{true: "stream", false: "poll"}[streaming]
		out := outside.Start(streaming)
		defer out.Close()
		remote := "A2A:system:bg-" + mode
		if _, err := c.Agents().Create(t.Context(), remote, map[string]string{a2a.ConfigCardURL: out.CardURL()}); err != nil {
			t.Fatal(err)
		}
		_, before := log.snapshot()
		r, err := askVia(t, c, "Asker:system:b-"+mode, askRequest{To: remote, Text: "slow later", Background: true})
		if err != nil || r.State[a2a.StateTaskID] == "" || r.State[a2a.StateFollow] != a2a.FollowBackground {
			t.Fatalf("%s: background start: %v %v", mode, r, err)
		}
		out.Release()
		waitFor(t, "the background result", func() bool {
			_, res := log.snapshot()
			return len(res) > len(before)
		})
		_, res := log.snapshot()
		got := res[len(before)]
		if got.Message != "done: later" || got.State[a2a.StateTaskID] != r.State[a2a.StateTaskID] || got.State[a2a.StateTaskState] != "TASK_STATE_COMPLETED" {
			t.Errorf("%s: background result: %v", mode, got)
		}

		// Cancelling a task followed in the background cancels the
		// remote task; the follow delivers the cancellation.
		out2 := outside.Start(streaming)
		defer out2.Close()
		if _, err := c.Agents().Create(t.Context(), remote+"-c", map[string]string{a2a.ConfigCardURL: out2.CardURL()}); err != nil {
			t.Fatal(err)
		}
		r, err = askVia(t, c, "Asker:system:b-"+mode, askRequest{To: remote + "-c", Text: "slow never", Background: true})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the second task to start", func() bool { return out2.Sends() == 1 })
		if _, err := c.Ask(t.Context(), remote+"-c", &client.Message{MessageType: a2a.TypeCancel, State: r.State}); err != nil {
			t.Fatalf("%s: cancel: %v", mode, err)
		}
		waitFor(t, "the cancellation delivered", func() bool {
			_, res := log.snapshot()
			return len(res) > len(before)+1
		})
		_, res = log.snapshot()
		if got := res[len(before)+1]; got.State[a2a.StateCode] != "Canceled" || got.State[a2a.StateTaskID] != r.State[a2a.StateTaskID] {
			t.Errorf("%s: cancelled background result: %v", mode, got)
		}
		if c := out2.Canceled(); len(c) != 1 || string(c[0]) != r.State[a2a.StateTaskID] {
			t.Errorf("%s: remote cancels: %v", mode, c)
		}
	}
}

// The A2A type counts polls, questions and loop breaks, and its requests
// to the remote agent carry the caller's trace.
func TestFollowObservability(t *testing.T) {
	e := etcdtest.Start(t)
	reg := prometheus.NewRegistry()
	s := followSilo(t, e, "obs", "/obs/", &askerLog{}, a2a.RemoteOptions{Metrics: reg})
	c := dialSilo(t, s)
	out := outside.Start(false)
	defer out.Close()
	if _, err := c.Agents().Create(t.Context(), "A2A:system:o", map[string]string{a2a.ConfigCardURL: out.CardURL()}); err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	done := make(chan error, 1)
	go func() {
		_, err := c.Ask(grain.WithTraceparent(t.Context(), "00-"+traceID+"-00f067aa0ba902b7-01"), "A2A:system:o", &client.Message{Message: "slow traced"})
		done <- err
	}()
	waitFor(t, "polls", func() bool { return counter(t, reg, "agentsilo_a2a_remote_polls_total", "") >= 2 })
	out.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tps := out.Traceparents()
	if len(tps) == 0 {
		t.Fatal("no traceparent reached the remote agent")
	}
	for _, tp := range tps {
		if !strings.Contains(tp, traceID) {
			t.Errorf("traceparent %q is not of the caller's trace %s", tp, traceID)
		}
	}
	if _, err := askVia(t, c, "Asker:system:o", askRequest{To: "A2A:system:o", Text: "same", Answers: []string{"Bo"}}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("loop: %v", err)
	}
	if n := counter(t, reg, "agentsilo_a2a_remote_loop_breaks_total", "repeats"); n != 1 {
		t.Errorf("loop breaks by repeats: %v", n)
	}
	if n := counter(t, reg, "agentsilo_a2a_remote_questions_total", ""); n != 3 {
		t.Errorf("questions: %v", n)
	}
}

// counter reads a counter of reg (with the label value, if any).
func counter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Polls of a task that is not done wait 2 s, then twice as long each
// time up to 30 s, each within 20% either way: on an injected clock, a
// poll comes only once its wait is over.
func TestPollBackoff(t *testing.T) {
	e := etcdtest.Start(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	reg := prometheus.NewRegistry()
	opts := a2a.RemoteOptions{PollMin: 2 * time.Second, PollMax: 30 * time.Second, Metrics: reg}
	a2a.SetRemoteClock(&opts, clk)
	s := followSilo(t, e, "poll", "/poll/", &askerLog{}, opts)
	c := dialSilo(t, s)
	out := outside.Start(false)
	defer out.Close()
	if _, err := c.Agents().Create(t.Context(), "A2A:system:p", map[string]string{a2a.ConfigCardURL: out.CardURL()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Ask(ctx, "A2A:system:p", &client.Message{Message: "slow forever"})
		done <- err
	}()
	polls := func() int { return int(counter(t, reg, "agentsilo_a2a_remote_polls_total", "")) }
	for i, d := range []time.Duration{2, 4, 8, 16, 30, 30} {
		d *= time.Second
		waitFor(t, "the next poll's timer", func() bool {
			n, _ := clk.Waiting()
			return n == 1 && polls() == i
		})
		clk.Advance(d * 79 / 100)
		if polls() != i {
			t.Fatalf("poll %d came before 80%% of its %v wait", i+1, d)
		}
		clk.Advance(d * 42 / 100)
		waitFor(t, "the poll after its wait", func() bool { return polls() == i+1 })
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("cancelled Ask: %v", err)
	}
	waitFor(t, "the remote task cancelled", func() bool { return len(out.Canceled()) == 1 })
}

// An A2A agent without configuration of its own takes its endpoint from
// RemoteOptions.Resolve (a directory), headers included.
func TestRemoteResolve(t *testing.T) {
	e := etcdtest.Start(t)
	out := outside.Start(true)
	defer out.Close()
	var mu sync.Mutex
	var asked []string
	s := followSilo(t, e, "res", "/res/", &askerLog{}, a2a.RemoteOptions{Resolve: func(_ context.Context, owner, alias string) (string, map[string]string, bool, error) {
		mu.Lock()
		asked = append(asked, owner+":"+alias)
		mu.Unlock()
		switch alias {
		case "known":
			return out.URL, map[string]string{"X-Tenant": "acme"}, true, nil
		case "broken":
			return "", nil, false, status.Error(codes.Unavailable, "directory down")
		}
		return "", nil, false, nil
	}})
	c := dialSilo(t, s)
	if r, err := c.Ask(t.Context(), "A2A:system:known", &client.Message{Message: "hello"}); err != nil || r.Message != "hello" {
		t.Fatalf("resolved: %v %v", r, err)
	}
	if _, err := c.Ask(t.Context(), "A2A:system:unknown", &client.Message{Message: "x"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("unknown: %v", err)
	}
	if _, err := c.Ask(t.Context(), "A2A:system:broken", &client.Message{Message: "x"}); status.Code(err) != codes.Unavailable {
		t.Errorf("broken directory: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, []string{"system:known", "system:unknown", "system:broken"}) {
		t.Errorf("resolved: %v", asked)
	}
}

// A background follow ends at MaxFollow: the remote task is cancelled and
// the caller gets DeadlineExceeded as the result.
func TestBackgroundFollowBounded(t *testing.T) {
	e := etcdtest.Start(t)
	log := &askerLog{}
	s := followSilo(t, e, "bound", "/bound/", log, a2a.RemoteOptions{MaxFollow: time.Second})
	c := dialSilo(t, s)
	out := outside.Start(true)
	defer out.Close()
	if _, err := c.Agents().Create(t.Context(), "A2A:system:b", map[string]string{a2a.ConfigCardURL: out.CardURL()}); err != nil {
		t.Fatal(err)
	}
	r, err := askVia(t, c, "Asker:system:b", askRequest{To: "A2A:system:b", Text: "slow never", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the result", func() bool {
		_, res := log.snapshot()
		return len(res) == 1
	})
	_, res := log.snapshot()
	if got := res[0]; got.State[a2a.StateCode] != "DeadlineExceeded" || got.State[a2a.StateTaskID] != r.State[a2a.StateTaskID] {
		t.Errorf("result: %v", got)
	}
	waitFor(t, "the remote task cancelled", func() bool { return len(out.Canceled()) == 1 })
}

// Both sides agents of clusters talking over A2A: questions of a remote
// cluster's agent come back to the calling agent, and a loop between them
// is cut the same way.
func TestQuestionsBetweenClusterAgents(t *testing.T) {
	e := etcdtest.Start(t)
	remote := startSilo(t, e, "remote", "/qremote/", nil)
	log := &askerLog{}
	s := followSilo(t, e, "qlocal", "/qlocal/", log, a2a.RemoteOptions{})
	c := dialSilo(t, s)
	create := func(addr, agent string) {
		t.Helper()
		card := "http://" + remote.A2AAddr() + "/a2a/" + agent + "/.well-known/agent-card.json"
		if _, err := c.Agents().Create(t.Context(), addr, map[string]string{a2a.ConfigCardURL: card, a2a.ConfigHeaderPrefix + "X-Agentsilo-Principal": "carol"}); err != nil {
			t.Fatal(err)
		}
	}
	create("A2A:system:iv", "Interview/carol/i")
	r, err := askVia(t, c, "Asker:system:q", askRequest{To: "A2A:system:iv", Text: "hi", Answers: []string{"name Bo"}})
	if err != nil || !strings.HasPrefix(r.Message, "hello Bo (context ") {
		t.Fatalf("interview: %v %v", r, err)
	}
	create("A2A:system:loop", "Fail/carol/f")
	_, err = askVia(t, c, "Asker:system:q", askRequest{To: "A2A:system:loop", Text: "type input-required", Answers: []string{"type input-required"}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "same answer 3 times in a row") {
		t.Errorf("a loop between cluster agents: %v", err)
	}
}

// TestLoopGuardErrorsHaveCodes: the loop guard's exported errors carry
// their gRPC code on their own, not only once wrapped.
func TestLoopGuardErrorsHaveCodes(t *testing.T) {
	for _, err := range []error{a2a.ErrTooManyRounds, a2a.ErrRepeatedExchange} {
		if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, errs.ErrResourceExhausted) {
			t.Errorf("%v: code %v, want ResourceExhausted", err, status.Code(err))
		}
	}
}
