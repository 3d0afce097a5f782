package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
)

// Protocol corners the SDK's handler does not judge as the spec does; the
// guard checks them before the handler runs:
//
//   - ListTasks: an explicit pageSize of 0 is InvalidParams (the SDK reads
//     it as unset, 50), and so is a status filter that is not a task state
//     (the SDK would match it against nothing);
//   - SendMessage to a task in a terminal state is UnsupportedOperation
//     (the SDK says InvalidParams);
//   - GetTask with a negative historyLength is InvalidParams (the SDK
//     reads it as unset: the whole history).
//
// And one the handler answers wrongly, which is corrected in its answer
// (paramErrors): params that do not decode into the method's request
// (a statusTimestampAfter that is not an RFC 3339 time, ...) are
// InvalidParams, not a parse error.

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

// checkGetTask refuses a negative historyLength.
func checkGetTask(p *spec.GetTaskRequest) error {
	if p != nil && p.HistoryLength != nil && *p.HistoryLength < 0 {
		return invalidParams("historyLength %d: want 0 or more (leave it out for the whole history)", *p.HistoryLength)
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

// maxPeek bounds the JSON-RPC body read ahead: a ListTasks request is
// small; a larger body is not looked at.
const maxPeek = 4 << 10

// readAhead looks at r, a request to an agent's endpoint (rest is the path
// after the agent), before the SDK does: it sets c.zeroPage if r is a
// ListTasks with an explicit pageSize of 0, in the query of GET /tasks
// (HTTP+JSON) or in the params of a JSON-RPC request; and it keeps the
// body of a JSON-RPC request of up to maxPeek bytes in c.head (read ahead
// and put back).
func readAhead(c *call, r *http.Request, rest string) {
	switch {
	case rest == "/tasks" && r.Method == http.MethodGet:
		if v, ok := r.URL.Query()["pageSize"]; ok && len(v) > 0 {
			n, err := strconv.Atoi(v[0])
			c.zeroPage = err == nil && n == 0
		}
	case (rest == "" || rest == v03Path) && r.Method == http.MethodPost && r.ContentLength <= maxPeek:
		head, err := io.ReadAll(io.LimitReader(r.Body, maxPeek+1))
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		if err != nil || len(head) > maxPeek {
			return
		}
		c.head = head
		if rest != "" || !bytes.Contains(head, []byte(`"pageSize"`)) {
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

// paramErrors is the ResponseWriter of the JSON-RPC handlers (1.0 and
// 0.3). The SDK decodes a request in two steps, the JSON-RPC envelope,
// then its params into the method's request type, and reports a failure
// of the second as a parse error (-32700) unless it is a JSON type
// mismatch: a well-formed request whose params hold, say, a
// statusTimestampAfter that is not an RFC 3339 time was answered -32700.
// The SDK offers no hook between the two steps (its transports decode
// before any interceptor runs), so its answer is corrected here: a parse
// error answered to a request whose envelope the SDK did read is
// InvalidParams (-32602). The SDK read the envelope when its answer
// carries the request's id; for a request without one (null), when the
// body, read ahead (call.head), is JSON. A larger body without an id
// keeps the SDK's answer.
//
// Only the first answer written can be such an error (a stream's first
// event), and only one carrying the code is decoded: other writes pass
// through untouched.
type paramErrors struct {
	http.ResponseWriter
	c       *call
	checked bool // the first answer (or event) went through
}

// Write implements http.ResponseWriter.
func (w *paramErrors) Write(b []byte) (int, error) {
	if w.checked {
		return w.ResponseWriter.Write(b)
	}
	// b is an answer ({...}\n) or an SSE event (data: {...}\n\n).
	body, isEvent := bytes.CutPrefix(b, []byte("data: "))
	if !isEvent && !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		return w.ResponseWriter.Write(b) // an SSE event's id line
	}
	w.checked = true
	trimmed := bytes.TrimRight(body, "\n")
	fixed, ok := w.fix(trimmed)
	if !ok {
		return w.ResponseWriter.Write(b)
	}
	prefix, suffix := b[:len(b)-len(body)], body[len(trimmed):]
	if _, err := w.ResponseWriter.Write(slices.Concat(prefix, fixed, suffix)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// fix returns body, a JSON-RPC answer, as InvalidParams if it is a parse
// error of a request the SDK read the envelope of (see paramErrors).
func (w *paramErrors) fix(body []byte) ([]byte, bool) {
	if !bytes.Contains(body, []byte("-32700")) {
		return nil, false
	}
	var resp map[string]json.RawMessage
	var e map[string]any
	if json.Unmarshal(body, &resp) != nil || json.Unmarshal(resp["error"], &e) != nil || e["code"] != float64(-32700) {
		return nil, false
	}
	if id := resp["id"]; (len(id) == 0 || string(id) == "null") && (w.c == nil || !json.Valid(w.c.head)) {
		return nil, false // the body is not JSON: a parse error indeed
	}
	msg, _ := e["message"].(string)
	e["code"] = -32602
	e["message"] = spec.ErrInvalidParams.Error() + ": " + strings.TrimPrefix(msg, spec.ErrParseError.Error()+": ")
	// The reason of the ErrorInfo the SDK adds to its errors.
	if data, ok := e["data"].([]any); ok {
		for _, d := range data {
			if m, ok := d.(map[string]any); ok && m["reason"] == spec.ErrorReason(spec.ErrParseError) {
				m["reason"] = spec.ErrorReason(spec.ErrInvalidParams)
			}
		}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, false
	}
	resp["error"] = b
	out, err := json.Marshal(resp)
	if err != nil {
		return nil, false
	}
	return out, true
}

// Flush implements http.Flusher, which the handler's streams need.
func (w *paramErrors) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *paramErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }
