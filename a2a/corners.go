package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
)

// Protocol corners the SDK's handler does not judge as the spec does; the
// guard checks them before the handler runs:
//
//   - ListTasks: an explicit pageSize of 0 is InvalidParams (the SDK reads
//     it as unset, 50), and so is a status filter that is not a task state
//     (the SDK would match it against nothing);
//   - SendMessage to a task in a terminal state is UnsupportedOperation
//     (the SDK says InvalidParams).

// taskStates are the states a ListTasks status filter may name.
var taskStates = map[spec.TaskState]bool{
	spec.TaskStateUnspecified: true, spec.TaskStateSubmitted: true, spec.TaskStateWorking: true,
	spec.TaskStateInputRequired: true, spec.TaskStateAuthRequired: true, spec.TaskStateCompleted: true,
	spec.TaskStateCanceled: true, spec.TaskStateFailed: true, spec.TaskStateRejected: true,
}

// checkListTasks refuses what ListTasks must not take as unset.
func checkListTasks(c *call, p *spec.ListTasksRequest) error {
	if c.zeroPage {
		return invalidParams("pageSize 0: want 1 to 100 (leave it out for 50)")
	}
	if p != nil && !taskStates[p.Status] {
		return invalidParams("status %q is not a task state: want TASK_STATE_SUBMITTED, _WORKING, _INPUT_REQUIRED, _AUTH_REQUIRED, _COMPLETED, _CANCELED, _FAILED or _REJECTED", clipID(string(p.Status)))
	}
	return nil
}

// checkTaskOpen refuses a message to a task of the caller's that is in a
// terminal state. A task that is not found is left to the SDK.
func (s *Server) checkTaskOpen(ctx context.Context, p *spec.SendMessageRequest) error {
	if p.Message.TaskID == "" || s.store == nil {
		return nil
	}
	st, err := s.store.Get(ctx, p.Message.TaskID)
	if err != nil || st == nil || st.Task == nil || !st.Task.Status.State.Terminal() {
		return nil
	}
	return spec.NewError(spec.ErrUnsupportedOperation, fmt.Sprintf("task %s is %s: a task in a terminal state takes no more messages; start a new task (same contextId to keep the conversation)", clipID(string(p.Message.TaskID)), st.Task.Status.State))
}

// clipID bounds a caller's string quoted back in an error.
func clipID(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// maxPeek bounds the JSON-RPC body read ahead to find a ListTasks with an
// explicit pageSize of 0: a ListTasks request is small; a larger body is
// not looked at.
const maxPeek = 4 << 10

// notePageSize sets c.zeroPage if r, a request to an agent's endpoint
// (rest is the path after the agent), is a ListTasks with an explicit
// pageSize of 0: in the query of GET /tasks (HTTP+JSON), or in the params
// of a JSON-RPC request, whose body it reads ahead and puts back.
func notePageSize(c *call, r *http.Request, rest string) {
	switch {
	case rest == "/tasks" && r.Method == http.MethodGet:
		if v, ok := r.URL.Query()["pageSize"]; ok && len(v) > 0 {
			n, err := strconv.Atoi(v[0])
			c.zeroPage = err == nil && n == 0
		}
	case rest == "" && r.Method == http.MethodPost && r.ContentLength <= maxPeek:
		head, err := io.ReadAll(io.LimitReader(r.Body, maxPeek+1))
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		if err != nil || len(head) > maxPeek || !bytes.Contains(head, []byte(`"pageSize"`)) {
			return
		}
		var req struct {
			Method string `json:"method"`
			Params struct {
				PageSize *json.Number `json:"pageSize"`
			} `json:"params"`
		}
		if json.Unmarshal(head, &req) != nil || req.Method != "ListTasks" || req.Params.PageSize == nil {
			return
		}
		n, err := req.Params.PageSize.Float64()
		c.zeroPage = err == nil && n == 0
	}
}

// jsonErrors is the ResponseWriter of the 0.3 JSON-RPC handler, whose
// error responses carry no Content-Type (Go would sniff text/plain): a
// response that sets none is application/json. Streams set theirs.
type jsonErrors struct {
	http.ResponseWriter
	typed bool
}

func (w *jsonErrors) typeIt() {
	if !w.typed {
		w.typed = true
		if h := w.Header(); h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
	}
}

// WriteHeader implements http.ResponseWriter.
func (w *jsonErrors) WriteHeader(code int) { w.typeIt(); w.ResponseWriter.WriteHeader(code) }

// Write implements http.ResponseWriter.
func (w *jsonErrors) Write(b []byte) (int, error) { w.typeIt(); return w.ResponseWriter.Write(b) }

// Flush implements http.Flusher, which the handler's streams need.
func (w *jsonErrors) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *jsonErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }
