package a2a_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// Protocol corners, as the A2A TCK checks them: ListTasks refuses an
// explicit pageSize of 0 and an unknown status filter (InvalidParams) on
// every binding, a message to a task in a terminal state is
// UnsupportedOperation, the 0.3 endpoint's errors are JSON, params that
// do not decode (a timestamp that is not one) are InvalidParams, not a
// parse error, and GetTask refuses a negative historyLength.
func TestProtocolCorners(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/corners/", nil)
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	hc := httpClient(t, dev)
	base := "http://" + s.A2AAddr() + "/a2a/Echo/dev/c1"

	// post sends a JSON-RPC body to path and returns the response's
	// Content-Type and its error code (0: none).
	post := func(path, body string) (string, int) {
		t.Helper()
		resp, err := hc.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Error *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("POST %s %s: %d %q is not JSON: %v", path, body, resp.StatusCode, b, err)
		}
		if out.Error == nil {
			return resp.Header.Get("Content-Type"), 0
		}
		return resp.Header.Get("Content-Type"), out.Error.Code
	}
	const invalidParams, parseError, methodNotFound = -32602, -32700, -32601

	t.Run("list page size 0", func(t *testing.T) {
		if _, code := post("", `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":0}}`); code != invalidParams {
			t.Fatalf("JSON-RPC pageSize 0: code %d, want %d", code, invalidParams)
		}
		for _, ok := range []string{`{}`, `{"pageSize":1}`, `{"pageSize":100}`} {
			if _, code := post("", `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":`+ok+`}`); code != 0 {
				t.Fatalf("JSON-RPC params %s: code %d", ok, code)
			}
		}
		for q, want := range map[string]int{"?pageSize=0": http.StatusBadRequest, "": http.StatusOK, "?pageSize=7": http.StatusOK} {
			resp, err := hc.Get(base + "/tasks" + q)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("GET /tasks%s: %d, want %d", q, resp.StatusCode, want)
			}
		}
	})

	for _, tr := range transports[:2] {
		t.Run("list unknown status "+tr, func(t *testing.T) {
			c := dial(t, s, "Echo/dev/c1", tr, dev)
			if _, err := c.ListTasks(t.Context(), &spec.ListTasksRequest{Status: "TASK_STATE_BOGUS"}); !isErr(err, spec.ErrInvalidParams) {
				t.Fatalf("unknown status: %v, want InvalidParams", err)
			}
			if _, err := c.ListTasks(t.Context(), &spec.ListTasksRequest{Status: spec.TaskStateCompleted}); err != nil {
				t.Fatalf("known status: %v", err)
			}
		})
	}

	for _, tr := range transports {
		t.Run("message to a finished task "+tr, func(t *testing.T) {
			c := dial(t, s, "Echo/dev/c2", tr, dev)
			task := taskOf(t)(c.SendMessage(t.Context(), text("hello")))
			if task.Status.State != spec.TaskStateCompleted {
				t.Fatalf("task %s", task.Status.State)
			}
			_, err := c.SendMessage(t.Context(), follow(task, "again"))
			if !isErr(err, spec.ErrUnsupportedOperation) {
				t.Fatalf("message to a completed task: %v, want UnsupportedOperation", err)
			}
		})
	}

	// A request whose params do not decode into the method's request is
	// InvalidParams (the SDK said parse error); a body that is not JSON
	// stays a parse error.
	t.Run("bad timestamp", func(t *testing.T) {
		for body, want := range map[string]int{
			`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"statusTimestampAfter":"yesterday"}}`:              invalidParams,
			`{"jsonrpc":"2.0","id":"a","method":"ListTasks","params":{"statusTimestampAfter":"2026-13-01T00:00:00Z"}}`: invalidParams,
			`{"jsonrpc":"2.0","method":"ListTasks","params":{"statusTimestampAfter":"yesterday"}}`:                     invalidParams,
			`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"statusTimestampAfter":"2026-01-01T00:00:00Z"}}`:   0,
			`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"statusTimestampAfter":`:                           parseError,
			`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"statusTimestampAfter":"yesterday"}`:               parseError,
		} {
			if ct, code := post("", body); code != want || !strings.HasPrefix(ct, "application/json") {
				t.Errorf("%s: code %d (%s), want %d", body, code, ct, want)
			}
		}
		// Another param that does not decode (a part with no content),
		// answered and as a stream's first event.
		const badPart = `"params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"bogus":"x"}]}}}`
		if _, code := post("", `{"jsonrpc":"2.0","id":1,"method":"SendMessage",`+badPart); code != invalidParams {
			t.Errorf("a part with no content: code %d, want %d", code, invalidParams)
		}
		resp, err := hc.Post(base, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"SendStreamingMessage",`+badPart))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || !strings.Contains(string(b), "data: {") ||
			!strings.Contains(string(b), `"code":-32602`) || !strings.Contains(string(b), `"id":7`) {
			t.Errorf("a stream's params with a part with no content: %s %s", resp.Header.Get("Content-Type"), b)
		}
	})

	t.Run("GetTask historyLength", func(t *testing.T) {
		resp, err := hc.Post(base, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"h1","role":"ROLE_USER","parts":[{"text":"hello"}]}}}`))
		if err != nil {
			t.Fatal(err)
		}
		var sent struct {
			Result struct {
				Task struct {
					ID string `json:"id"`
				} `json:"task"`
			} `json:"result"`
		}
		err = json.NewDecoder(resp.Body).Decode(&sent)
		resp.Body.Close()
		id := sent.Result.Task.ID
		if err != nil || id == "" {
			t.Fatalf("send: %v %+v", err, sent)
		}
		for n, want := range map[string]int{"-1": invalidParams, "-100": invalidParams, "0": 0, "1": 0} {
			if _, code := post("", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"`+id+`","historyLength":`+n+`}}`); code != want {
				t.Errorf("JSON-RPC historyLength %s: code %d, want %d", n, code, want)
			}
		}
		if _, code := post("/v0.3", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"`+id+`","historyLength":-1}}`); code != invalidParams {
			t.Errorf("0.3 historyLength -1: code %d, want %d", code, invalidParams)
		}
		for q, want := range map[string]int{"?historyLength=-1": http.StatusBadRequest, "?historyLength=0": http.StatusOK} {
			resp, err := hc.Get(base + "/tasks/" + id + q)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("GET /tasks/{id}%s: %d, want %d", q, resp.StatusCode, want)
			}
		}
	})

	t.Run("0.3 errors are JSON", func(t *testing.T) {
		for body, want := range map[string]int{
			`{`: parseError,
			`{"jsonrpc":"2.0","id":1,"method":"no/such"}`:                          methodNotFound,
			`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`: -32001,
		} {
			ct, code := post("/v0.3", body)
			if code != want || !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("0.3 %s: code %d, Content-Type %q; want %d as application/json", body, code, ct, want)
			}
		}
	})
}
