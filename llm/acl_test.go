package llm_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

// onlyOwn lets a principal message its own agents only.
type onlyOwn struct{}

func (onlyOwn) AuthorizeMessage(_ context.Context, principal string, to grain.Address) error {
	if to.Owner != principal {
		return errs.New(codes.PermissionDenied, "%s may not message %s", principal, to)
	}
	return nil
}

// A tool call is an Ask from the model agent's turn, on behalf of the
// principal who started it: another owner's agent that principal may not
// message is refused, and the model sees the refusal as the tool's result.
func TestToolCallFollowsACL(t *testing.T) {
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("own", "a", 1), addCall("other", "bob:a", 1)}},
		fakemodel.Step{Text: "done"},
	)
	defer srv.Close()
	e := start(t, definition(llm.ProviderOpenAI, srv.OpenAIURL()), envConfig{authorizer: onlyOwn{}})
	r, err := e.rt.Ask(t.Context(), &grain.Message{From: session, To: "Helper:h", Message: "go", OnBehalfOf: "alice"})
	if err != nil || r.Message != "done" {
		t.Fatalf("%v %v", r, err)
	}
	results := map[string]string{}
	for _, m := range srv.Requests()[1].Messages {
		if m.Role == "tool" {
			results[m.ToolCallID] = m.Data
		}
	}
	if results["own"] != `{"total":1}` || !strings.Contains(results["other"], "PermissionDenied") {
		t.Errorf("results %v", results)
	}
	data, _, _ := e.store.Load(t.Context(), grain.Address{Type: "Counter", Owner: "bob", Alias: "a"})
	if data != nil {
		t.Errorf("bob's counter was changed: %s", data)
	}
}

// Each model call and tool call has its span, with the GenAI semantic
// conventions' attributes.
func TestSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("c1", "a", 1)}, InputTokens: 11, OutputTokens: 7},
		fakemodel.Step{Text: "done"},
	)
	defer srv.Close()
	e := start(t, definition(llm.ProviderAnthropic, srv.URL()), envConfig{}, llm.WithTracerProvider(tp))
	if _, err := e.ask(t.Context(), "Helper:h", "go", ""); err != nil {
		t.Fatal(err)
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			m[kv.Key] = kv.Value
		}
		return m
	}
	var chats, tools int
	for _, s := range sr.Ended() {
		a := attrs(s)
		switch s.Name() {
		case "chat fake-model":
			chats++
			if a["gen_ai.operation.name"].AsString() != "chat" || a["gen_ai.request.model"].AsString() != "fake-model" || a["gen_ai.provider.name"].AsString() != "anthropic" {
				t.Errorf("chat span %v", a)
			}
			if chats == 1 && (a["gen_ai.usage.input_tokens"].AsInt64() != 11 || a["gen_ai.usage.output_tokens"].AsInt64() != 7) {
				t.Errorf("chat span usage %v", a)
			}
		case "execute_tool Counter_add":
			tools++
			if a["gen_ai.operation.name"].AsString() != "execute_tool" || a["gen_ai.tool.name"].AsString() != "Counter_add" || a["gen_ai.tool.call.id"].AsString() != "c1" {
				t.Errorf("tool span %v", a)
			}
		}
	}
	if chats != 2 || tools != 1 {
		t.Errorf("%d chat spans and %d tool spans, want 2 and 1", chats, tools)
	}
}
