package llm_test

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

// What a model gets wrong is a tool error it sees: a tool the definition
// does not give, arguments that are not JSON or not the schema, an agent
// address that is not one; the turn goes on and answers.
func TestBadToolCalls(t *testing.T) {
	for _, provider := range []string{llm.ProviderOpenAI, llm.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			srv := fakemodel.New(
				fakemodel.Step{ToolCalls: []fakemodel.ToolCall{
					{ID: "u1", Name: "delete_everything", Arguments: `{}`},
					{ID: "u2", Name: "Counter_add", Arguments: `{"agent": "a", "input": {"n": "two"}}`},
					{ID: "u3", Name: "Counter_add", Arguments: `{"agent": "bad address!", "input": {"n": 1}}`},
					{ID: "u4", Name: "Counter_add", Arguments: `{"agent": "a"}`},
				}},
				fakemodel.Step{Text: "I could not."},
			)
			defer srv.Close()
			e := start(t, definition(provider, baseURL(srv, provider)), envConfig{})
			r, err := e.ask(t.Context(), "Helper:h", "go", "")
			if err != nil || r.Message != "I could not." {
				t.Fatalf("answer %v, %v", r, err)
			}
			results := map[string]fakemodel.Message{}
			for _, m := range srv.Requests()[1].Messages {
				if m.Role == "tool" {
					results[m.ToolCallID] = m
				}
			}
			for id, want := range map[string]string{
				"u1": `there is no tool "delete_everything"; the tools are: Counter_add`,
				"u2": "do not match the tool's schema",
				"u3": "InvalidArgument",
				"u4": "do not match the tool's schema",
			} {
				if got := results[id].Text; !strings.Contains(got, want) {
					t.Errorf("result of %s: %q, want it to say %q", id, got, want)
				}
				if provider == llm.ProviderAnthropic && !results[id].IsError {
					t.Errorf("result of %s is not marked an error", id)
				}
			}
			if n := e.total(t, "a"); n != 0 {
				t.Errorf("total %d: a refused call ran", n)
			}
		})
	}
}

// Arguments that are not JSON at all (an OpenAI-compatible model may
// write anything) are a tool error too.
func TestArgumentsNotJSON(t *testing.T) {
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "x", Name: "Counter_add", Arguments: `{"agent": "a", "input": {"n": 1`}}},
		fakemodel.Step{Text: "sorry"},
	)
	defer srv.Close()
	e := start(t, definition(llm.ProviderOpenAI, srv.OpenAIURL()), envConfig{})
	if r, err := e.ask(t.Context(), "Helper:h", "go", ""); err != nil || r.Message != "sorry" {
		t.Fatalf("answer %v, %v", r, err)
	}
	if got := srv.Requests()[1].LastMessage().Text; !strings.Contains(got, "not JSON") {
		t.Errorf("tool result %q", got)
	}
}

// The loop guard: the same call made three times in a turn ends it.
func TestLoopGuard(t *testing.T) {
	call := fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("", "a", 1)}}
	srv := fakemodel.New(call, call, call, fakemodel.Step{Text: "never asked"})
	defer srv.Close()
	e := start(t, definition(llm.ProviderOpenAI, srv.OpenAIURL()), envConfig{})
	_, err := e.ask(t.Context(), "Helper:h", "go", "")
	if errs.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "same arguments 3 times") {
		t.Fatalf("err %v (code %v), want the loop guard's ResourceExhausted", err, errs.Code(err))
	}
	if n := e.total(t, "a"); n != 2 {
		t.Errorf("total %d, want 2 (the third call not run)", n)
	}
	if srv.Left() != 1 {
		t.Errorf("the model was asked after the guard ended the turn")
	}
	// The conversation stays well formed: the third call has a result
	// saying it did not run, and the next turn works.
	if r, err := e.ask(t.Context(), "Helper:h", "again", ""); err != nil || r.Message != "never asked" {
		t.Fatalf("next turn: %v %v", r, err)
	}
	last := srv.Requests()[len(srv.Requests())-1]
	n := 0
	for _, m := range last.Messages {
		if m.Role == "tool" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("the next turn sent %d tool results, want 3", n)
	}
}

// Model errors are errors of the turn with the right code: 500 and 429
// are retried by the SDK (honouring Retry-After) and end the attempt with
// Unavailable and ResourceExhausted once the retries are spent; a 400 is
// InvalidArgument and ends the turn; a stream cut midway is Unavailable.
// An attempt that failed for a passing reason leaves the turn to resume:
// the request's retry (same idempotency key) asks the model again for
// the step that got no response, not for the ones recorded.
func TestModelErrors(t *testing.T) {
	for _, provider := range []string{llm.ProviderOpenAI, llm.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			e500 := fakemodel.Step{Status: http.StatusInternalServerError, RetryAfter: "0"}
			e429 := fakemodel.Step{Status: http.StatusTooManyRequests, RetryAfter: "0"}
			srv := fakemodel.New(
				// Turn 1: a 500 retried, then the answer.
				e500, fakemodel.Step{Text: "one"},
				// Turn 2: 500 three times (the SDK's 2 retries spent).
				e500, e500, e500,
				// Its retry: a tool call, then 429 three times.
				fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("k", "a", 1)}}, e429, e429, e429,
				// Its second retry: the answer.
				fakemodel.Step{Text: "two"},
				// Turn 3: a bad request.
				fakemodel.Step{Status: http.StatusBadRequest, ErrorMessage: "messages: too long"},
			)
			defer srv.Close()
			e := start(t, definition(provider, baseURL(srv, provider)), envConfig{})
			ctx := t.Context()
			if r, err := e.ask(ctx, "Helper:h", "first", "k1"); err != nil || r.Message != "one" {
				t.Fatalf("turn 1: %v %v", r, err)
			}
			_, err := e.ask(ctx, "Helper:h", "second", "k2")
			if errs.Code(err) != codes.Unavailable {
				t.Fatalf("turn 2 after 500s: %v (code %v), want Unavailable", err, errs.Code(err))
			}
			_, err = e.ask(ctx, "Helper:h", "second", "k2")
			if errs.Code(err) != codes.ResourceExhausted {
				t.Fatalf("turn 2's retry after 429s: %v (code %v), want ResourceExhausted", err, errs.Code(err))
			}
			if r, err := e.ask(ctx, "Helper:h", "second", "k2"); err != nil || r.Message != "two" {
				t.Fatalf("turn 2's second retry: %v %v", r, err)
			}
			if srv.Count(5) != 1 || e.total(t, "a") != 1 {
				t.Errorf("the recorded tool call was asked for %d times, ran to a total of %d; want 1 and 1", srv.Count(5), e.total(t, "a"))
			}
			// The answer is recorded by its key: asked again, not run.
			if r, err := e.ask(ctx, "Helper:h", "second", "k2"); err != nil || r.Message != "two" {
				t.Fatalf("turn 2 asked again: %v %v", r, err)
			}
			_, err = e.ask(ctx, "Helper:h", "third", "k3")
			if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "too long") {
				t.Fatalf("turn 3: %v (code %v), want InvalidArgument", err, errs.Code(err))
			}
			_, err2 := e.ask(ctx, "Helper:h", "third", "k3")
			if errs.Code(err2) != codes.InvalidArgument {
				t.Fatalf("turn 3 asked again: %v, want the recorded InvalidArgument", err2)
			}
			if srv.Left() != 0 || len(srv.Requests()) != 11 {
				for _, r := range srv.Requests() {
					t.Logf("request %d: step %d, %d messages", r.N, r.Step, len(r.Messages))
				}
				t.Errorf("%d requests, %d steps left", len(srv.Requests()), srv.Left())
			}
		})
	}
}

// A stream cut midway is Unavailable; the retry asks the model again.
func TestStreamCut(t *testing.T) {
	for _, provider := range []string{llm.ProviderOpenAI, llm.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			srv := fakemodel.New(
				fakemodel.Step{Text: "a long answer, cut", CutStream: true},
				fakemodel.Step{Text: "whole"},
			)
			defer srv.Close()
			e := start(t, definition(provider, baseURL(srv, provider)), envConfig{}, llm.WithStreaming(true))
			_, err := e.ask(t.Context(), "Helper:h", "hi", "k")
			if errs.Code(err) != codes.Unavailable {
				t.Fatalf("cut stream: %v (code %v), want Unavailable", err, errs.Code(err))
			}
			if r, err := e.ask(t.Context(), "Helper:h", "hi", "k"); err != nil || r.Message != "whole" {
				t.Fatalf("retry: %v %v", r, err)
			}
			if c := e.conversation(t, "Helper:h"); len(c.Messages) != 2 {
				t.Errorf("conversation %+v, want the question and one answer", c.Messages)
			}
		})
	}
}
