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
// UnsupportedOperation, and the 0.3 endpoint's errors are JSON.
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
