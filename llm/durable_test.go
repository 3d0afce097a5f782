package llm_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/graintest"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/state"
)

// A runtime stops in the middle of a turn, while a tool call runs (its
// callee has made its change and not answered): a new runtime on the same
// etcd, asked again with the request's idempotency key, resumes the turn
// from its record. The model is never asked again for the step it had
// answered, and the callee's change happened once: the tool's Ask carries
// the same idempotency key, so its keyed save is refused as applied.
func TestResumeAfterCrash(t *testing.T) {
	for _, provider := range []string{llm.ProviderOpenAI, llm.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			store := state.NewEtcd(etcdtest.Start(t).Client(t), "/llm/")
			srv := fakemodel.New(
				fakemodel.Step{Text: "adding", ToolCalls: []fakemodel.ToolCall{addCall("c1", "a", 5)}},
				fakemodel.Step{Text: "added 5"},
			)
			defer srv.Close()
			def := definition(provider, baseURL(srv, provider))

			entered := make(chan struct{}, 1)
			hold := make(chan struct{}) // never closed: the first runtime's add never answers
			e1 := start(t, def, envConfig{store: store, entered: entered, hold: hold})
			ctx1, cancel1 := context.WithCancel(t.Context())
			defer cancel1()
			errc := make(chan error, 1)
			go func() {
				_, err := e1.ask(ctx1, "Helper:h", "add 5 to a", "req-1")
				errc <- err
			}()
			<-entered // Counter:a saved 5 and holds its answer
			// The crash: the caller goes away and the runtime stops
			// without the turn's ending.
			cancel1()
			if err := <-errc; err == nil {
				t.Fatal("the interrupted ask succeeded")
			}
			e1.close(t)
			if n := e1.total(t, "a"); n != 5 {
				t.Fatalf("total %d before the restart, want 5", n)
			}

			e2 := start(t, def, envConfig{store: store})
			c := e2.conversation(t, "Helper:h")
			if c.Current == nil || c.Current.Key != "req-1" || c.Current.Rounds != 1 || len(c.Messages) != 2 {
				t.Fatalf("the record after the crash: %+v", c)
			}
			r, err := e2.ask(t.Context(), "Helper:h", "add 5 to a", "req-1")
			if err != nil || r.Message != "added 5" {
				t.Fatalf("resumed turn: %v, %v", r, err)
			}
			if srv.Count(0) != 1 || srv.Count(1) != 1 || len(srv.Requests()) != 2 {
				t.Errorf("the model was asked %d times for step 0 and %d for step 1 (%d requests), want once each", srv.Count(0), srv.Count(1), len(srv.Requests()))
			}
			if n := e2.total(t, "a"); n != 5 {
				t.Errorf("total %d after the resumed turn, want 5 (the add applied once)", n)
			}
			if got := srv.Requests()[1].LastMessage(); got.ToolCallID != "c1" || !strings.Contains(got.Text, "already ran") {
				t.Errorf("the model got %+v for c1, want the result saying it already ran", got)
			}
			// A retry of the request now gets the recorded answer.
			if r, err := e2.ask(t.Context(), "Helper:h", "add 5 to a", "req-1"); err != nil || r.Message != "added 5" {
				t.Fatalf("retry after the end: %v, %v", r, err)
			}
			if len(srv.Requests()) != 2 {
				t.Errorf("the retry asked the model")
			}
		})
	}
}

// A crash while the model call is in flight: the step had no recorded
// response, so the resumed turn asks for it again, and only for it.
func TestResumeAfterCrashInModelCall(t *testing.T) {
	store := state.NewEtcd(etcdtest.Start(t).Client(t), "/llm/")
	arrived := make(chan struct{})
	never := make(chan struct{})
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("c1", "a", 1)}},
		fakemodel.Step{Entered: arrived, Wait: never},
		fakemodel.Step{Text: "done"},
	)
	defer srv.Close()
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	e1 := start(t, def, envConfig{store: store})
	ctx1, cancel1 := context.WithCancel(t.Context())
	defer cancel1()
	errc := make(chan error, 1)
	go func() {
		_, err := e1.ask(ctx1, "Helper:h", "go", "req")
		errc <- err
	}()
	<-arrived
	cancel1()
	<-errc
	e1.close(t)

	e2 := start(t, def, envConfig{store: store})
	if r, err := e2.ask(t.Context(), "Helper:h", "go", "req"); err != nil || r.Message != "done" {
		t.Fatalf("resumed: %v %v", r, err)
	}
	if srv.Count(0) != 1 || srv.Count(1) != 1 || srv.Count(2) != 1 || e2.total(t, "a") != 1 {
		t.Errorf("steps asked %d %d %d times, total %d", srv.Count(0), srv.Count(1), srv.Count(2), e2.total(t, "a"))
	}
	if n := len(srv.Requests()[2].Messages); n != 3 {
		t.Errorf("the resumed step sent %d messages, want 3 (question, call, result)", n)
	}
}

// A new request to an agent whose last turn was left unfinished first
// finishes that turn, then starts its own.
func TestUnfinishedTurnFirst(t *testing.T) {
	store := grain.NewMemoryStateStore()
	srv := fakemodel.New(
		fakemodel.Step{Status: 500},
		fakemodel.Step{Text: "first answer"},
		fakemodel.Step{Text: "second answer"},
	)
	defer srv.Close()
	e := start(t, definition(llm.ProviderOpenAI, srv.OpenAIURL()), envConfig{store: store}, llm.WithMaxRetries(0))
	if _, err := e.ask(t.Context(), "Helper:h", "one", "k1"); errs.Code(err) != codes.Unavailable {
		t.Fatalf("first: %v", err)
	}
	if r, err := e.ask(t.Context(), "Helper:h", "two", "k2"); err != nil || r.Message != "second answer" {
		t.Fatalf("second: %v %v", r, err)
	}
	if r, err := e.ask(t.Context(), "Helper:h", "one", "k1"); err != nil || r.Message != "first answer" {
		t.Fatalf("first's retry: %v %v", r, err)
	}
	c := e.conversation(t, "Helper:h")
	if len(c.Turns) != 2 || len(c.Messages) != 4 || c.Messages[2].Text != "two" {
		t.Errorf("conversation %+v", c)
	}
}

// Limits end a turn with a clear error: max_rounds, max_output_tokens
// (each call asks for what is left), an answer cut at the token limit, and
// the timeout, on the agent's clock, across tool calls.
func TestLimits(t *testing.T) {
	t.Run("max_rounds", func(t *testing.T) {
		srv := fakemodel.New(
			fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("", "a", 1)}},
			fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("", "a", 2)}},
		)
		defer srv.Close()
		def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
		def.Limits.MaxRounds = 2
		e := start(t, def, envConfig{})
		_, err := e.ask(t.Context(), "Helper:h", "go", "")
		if errs.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "limits.max_rounds (2") {
			t.Fatalf("%v", err)
		}
		if e.total(t, "a") != 3 {
			t.Errorf("total %d", e.total(t, "a"))
		}
	})
	t.Run("max_output_tokens", func(t *testing.T) {
		srv := fakemodel.New(
			fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("", "a", 1)}, OutputTokens: 6},
			fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("", "a", 2)}, OutputTokens: 6},
		)
		defer srv.Close()
		def := definition(llm.ProviderAnthropic, srv.URL())
		def.Limits.MaxOutputTokens = 10
		e := start(t, def, envConfig{})
		_, err := e.ask(t.Context(), "Helper:h", "go", "")
		if errs.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "limits.max_output_tokens (10") {
			t.Fatalf("%v", err)
		}
		if r := srv.Requests(); r[0].MaxTokens != 10 || r[1].MaxTokens != 4 {
			t.Errorf("max tokens asked: %d, %d; want 10, 4", r[0].MaxTokens, r[1].MaxTokens)
		}
	})
	t.Run("cut at the token limit", func(t *testing.T) {
		srv := fakemodel.New(fakemodel.Step{Text: "a long", StopReason: fakemodel.Stop})
		defer srv.Close()
		e := start(t, definition(llm.ProviderOpenAI, srv.OpenAIURL()), envConfig{})
		_, err := e.ask(t.Context(), "Helper:h", "go", "")
		if errs.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "cut at its token limit") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		srv := fakemodel.New(
			fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("", "a", 1)}},
			fakemodel.Step{Text: "never asked"},
		)
		defer srv.Close()
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		entered := make(chan struct{}, 1)
		hold := make(chan struct{})
		def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
		def.Limits.Timeout = llm.Duration(time.Minute)
		e := start(t, def, envConfig{entered: entered, hold: hold}, llm.WithClock(clk))
		errc := make(chan error, 1)
		go func() {
			_, err := e.ask(t.Context(), "Helper:h", "go", "")
			errc <- err
		}()
		<-entered
		clk.Advance(2 * time.Minute)
		close(hold)
		err := <-errc
		if errs.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "limits.timeout (1m0s)") {
			t.Fatalf("%v", err)
		}
		if srv.Left() != 1 {
			t.Errorf("the model was asked after the timeout")
		}
	})
}

// The reminder a turn registers resumes it without its caller: a turn
// whose model call failed stays unfinished, the reminder's tick (a minute
// later, on the test's clock) ends it and records its answer by key; the
// caller's retry gets that answer without a model call, and the next tick
// removes the reminder.
func TestResumeByReminder(t *testing.T) {
	env := graintest.New(t)
	srv := fakemodel.New(
		fakemodel.Step{Status: 500},
		fakemodel.Step{Text: "resumed"},
	)
	defer srv.Close()
	def := definition(llm.ProviderAnthropic, srv.URL())
	def.Tools = nil
	f, info, err := llm.Factory(nil, def, llm.WithGetenv(getenv), llm.WithMaxRetries(0), llm.WithClock(env))
	if err != nil {
		t.Fatal(err)
	}
	env.Register(def.Type, f, info)
	ctx := t.Context()
	_, err = env.Ask(ctx, "Helper:h", &grain.Message{Message: "hi", IdempotencyKey: "k"})
	if errs.Code(err) != codes.Unavailable {
		t.Fatalf("first attempt: %v", err)
	}
	if rs := env.Reminders("Helper:h"); len(rs) != 1 || rs[0].Name != llm.ResumeReminder {
		t.Fatalf("reminders %+v, want the resume reminder", rs)
	}
	env.Advance(llm.DefaultResumeAfter)
	// The retry is queued behind the tick; the conversation skill, which
	// runs beside a turn, is read after it.
	if r, err := env.Ask(ctx, "Helper:h", &grain.Message{Message: "hi", IdempotencyKey: "k"}); err != nil || r.Message != "resumed" {
		t.Fatalf("retry: %v %v", r, err)
	}
	r, err := env.Ask(ctx, "Helper:h", &grain.Message{MessageType: llm.SkillConversation, DataType: grain.JSONType})
	if err != nil {
		t.Fatal(err)
	}
	var c llm.Conversation
	if err := json.Unmarshal(r.Data, &c); err != nil {
		t.Fatal(err)
	}
	if c.Current != nil || len(c.Answers) != 1 || c.Answers[0].Key != "k" || c.Answers[0].Text != "resumed" {
		t.Fatalf("after the tick: %+v", c)
	}
	// The reminder stays for the activation's next turns; its next tick,
	// finding none unfinished, removes it.
	if rs := env.Reminders("Helper:h"); len(rs) != 1 {
		t.Errorf("reminders %+v after the turn ended, want the resume reminder still", rs)
	}
	env.Advance(llm.DefaultResumePeriod)
	// A request queued behind the tick (one the runtime cannot answer by
	// itself, as it does a repeated key).
	if _, err := env.Ask(ctx, "Helper:h", &grain.Message{MessageType: "no-such-skill"}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("a request after the next tick: %v", err)
	}
	if rs := env.Reminders("Helper:h"); len(rs) != 0 {
		t.Errorf("reminders %+v after a tick with no turn unfinished (%d ticks)", rs, env.Ticks("Helper:h", llm.ResumeReminder))
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}
}

// An idempotency key is its principal's: another principal's request with
// the same key is a turn of its own, not a way to read the first's answer.
// (Within the runtime's idempotency window, on the silo that ran it, the
// runtime itself answers a repeated key, whoever sends it: this test asks
// on a new runtime, as after a restart or a move.)
func TestKeyIsThePrincipals(t *testing.T) {
	srv := fakemodel.New(fakemodel.Step{Text: "for alice"}, fakemodel.Step{Text: "for bob"})
	defer srv.Close()
	store := grain.NewMemoryStateStore()
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	e1 := start(t, def, envConfig{store: store})
	if r, err := e1.ask(t.Context(), "Helper:alice:h", "hi", "k"); err != nil || r.Message != "for alice" {
		t.Fatalf("alice: %v %v", r, err)
	}
	e1.close(t)
	e2 := start(t, def, envConfig{store: store})
	r, err := e2.rt.Ask(t.Context(), &grain.Message{From: "Session:bob:s", To: "Helper:alice:h", Message: "hi", IdempotencyKey: "k"})
	if err != nil || r.Message != "for bob" {
		t.Fatalf("bob: %v %v", r, err)
	}
	e2.close(t)
	e3 := start(t, def, envConfig{store: store})
	if r, err := e3.ask(t.Context(), "Helper:alice:h", "hi", "k"); err != nil || r.Message != "for alice" {
		t.Fatalf("alice again: %v %v", r, err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}
}
