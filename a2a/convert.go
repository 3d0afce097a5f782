package a2a

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"strings"
	"unicode/utf8"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// The message state keys the executor sets on what it asks an agent, and
// the A2A agent type on its replies.
//
// Two tasks may be in play: the task of this server that a caller's A2A
// message made (the executor gives its ids to the agent asked, with
// StateInbound), and the remote task an agent of RemoteType runs on an
// A2A agent outside. StateContextID and StateTaskID name the first on a
// message the executor asks, and the second on what RemoteType replies
// (as they always have, so that a gateway caller asks again with the
// reply's state); StateRemoteContextID and StateRemoteTaskID name only
// the second, and are what RemoteType reads on a message that came
// through this server.
const (
	// StateContextID holds the A2A contextId: the same for every turn of a
	// conversation.
	StateContextID = "a2a.context_id"
	// StateTaskID holds the A2A task id.
	StateTaskID = "a2a.task_id"
	// StateInbound is "true" on what the executor asks an agent: the
	// StateContextID and StateTaskID beside it are this server's task,
	// the caller's, not a remote task to continue.
	StateInbound = "a2a.inbound"
	// StateRemoteContextID and StateRemoteTaskID hold, on RemoteType's
	// replies, the remote agent's contextId and task id (also in
	// StateContextID and StateTaskID); on a message to RemoteType, the
	// remote task to continue, whichever way the message came.
	StateRemoteContextID = "a2a.remote_context_id"
	StateRemoteTaskID    = "a2a.remote_task_id"
	// StateTaskState holds, on the A2A agent type's replies, the remote
	// task's state (TASK_STATE_COMPLETED, TASK_STATE_INPUT_REQUIRED, ...).
	StateTaskState = "a2a.task_state"
	// StateArtifactID names, on a pushed artifact chunk, the artifact it
	// belongs to (default: one streamed artifact per turn).
	StateArtifactID = "a2a.artifact_id"
)

// The message types with a meaning for A2A.
const (
	// TypeInputRequired on a reply makes the task input-required: its text
	// is the question, and the next message on the task reaches the same
	// agent.
	TypeInputRequired = "input-required"
	// TypeAuthRequired on a reply announces auth-required; the task then
	// rests in input-required, for a message after the client has
	// authenticated out of band (an execution of the SDK ends only on a
	// terminal or input-required state). An Unauthenticated error does the
	// same.
	TypeAuthRequired = "auth-required"
	// TypeRejected on a reply makes the task rejected, its text the reason.
	TypeRejected = "rejected"
	// TypeArtifact on a one-way message pushed to the caller during a turn
	// streams an artifact chunk (appended to the artifact StateArtifactID
	// names); any other push is a progress status update.
	TypeArtifact = "a2a.artifact"
	// TypeProgress is what the A2A agent type pushes for a remote status
	// update.
	TypeProgress = "progress"
)

// metaCode is the metadata key, on the status message of a failed or
// rejected task, of the gRPC code the agent returned.
const metaCode = "agentsilo.code"

// toAgentMessage turns an A2A message into the agentsilo message asked of
// an agent: text parts joined by newlines are its text, one data part
// (as JSON) or one raw part is its data, URL parts are its files. Its
// content label is agent-message from outside the cluster, or the lower
// label its parts' metadata (grain.LabelKey) claim (a claim above
// agent-message counts as agent-message: a caller cannot raise it). It
// reports InvalidParams for what it cannot carry.
func toAgentMessage(m *spec.Message) (*grain.Message, error) {
	if m == nil {
		return nil, invalidParams("no message")
	}
	claim, _ := partsLabel(m.Parts)
	out := &grain.Message{Label: grain.LabelAgentMessage.Lower(claim), Outside: true}
	var texts []string
	payload := false
	for i, p := range m.Parts {
		if p == nil {
			return nil, invalidParams("part %d is null", i+1)
		}
		switch c := p.Content.(type) {
		case spec.Text:
			texts = append(texts, string(c))
		case spec.Data:
			if payload {
				return nil, invalidParams("part %d: at most one data or raw part per message", i+1)
			}
			b, err := json.Marshal(c.Value)
			if err != nil {
				return nil, invalidParams("part %d: data: %w", i+1, err)
			}
			out.Data, out.DataType, payload = b, "application/json", true
		case spec.Raw:
			if payload {
				return nil, invalidParams("part %d: at most one data or raw part per message", i+1)
			}
			out.Data, out.DataType, payload = []byte(c), p.MediaType, true
			if out.DataType == "" {
				out.DataType = "application/octet-stream"
			}
		case spec.URL:
			out.Files = append(out.Files, string(c))
		default:
			return nil, invalidParams("part %d has no content", i+1)
		}
	}
	out.Message = strings.Join(texts, "\n")
	if sk, ok := m.Metadata[MetaSkill]; ok {
		name, _ := sk.(string)
		if name == "" || grain.IsReserved(name) || !utf8.ValidString(name) {
			return nil, invalidParams("metadata %s: want the name of a skill of the agent", MetaSkill)
		}
		out.MessageType = name // a typed skill's arguments are checked against its schema
	}
	if !utf8.ValidString(out.Message) || !utf8.ValidString(out.DataType) {
		return nil, invalidParams("text is not valid UTF-8")
	}
	for _, f := range out.Files {
		if !utf8.ValidString(f) {
			return nil, invalidParams("a URL is not valid UTF-8")
		}
	}
	return out, nil
}

// toParts turns an agent's message into A2A parts: its text, its data (a
// data part for JSON, else a raw part of its data type) and its files (URL
// parts). An empty message is one empty text part: parts may not be empty.
// Each part's metadata carries the message's content label
// (grain.LabelKey) and, for content from outside the cluster,
// grain.OutsideKey.
func toParts(m *grain.Message) spec.ContentParts {
	parts := contentParts(m)
	if name := m.Label.Name(); name != "" {
		for _, p := range parts {
			p.Metadata = map[string]any{grain.LabelKey: name}
			if m.Outside {
				p.Metadata[grain.OutsideKey] = true
			}
		}
	}
	return parts
}

// partsLabel is the lowest content label the parts' metadata claim
// (UNSPECIFIED if none does; a name this version does not know counts as
// tool-output), and whether one says it is from outside the cluster.
func partsLabel(parts spec.ContentParts) (l grain.Label, outside bool) {
	for _, p := range parts {
		if p == nil {
			continue
		}
		if v, ok := p.Metadata[grain.LabelKey]; ok {
			name, _ := v.(string)
			claim, known := grain.ParseLabel(name)
			if !known {
				claim = grain.LabelToolOutput
			}
			l = l.Lower(claim)
		}
		if o, _ := p.Metadata[grain.OutsideKey].(bool); o {
			outside = true
		}
	}
	return l, outside
}

func contentParts(m *grain.Message) spec.ContentParts {
	var parts spec.ContentParts
	if m.Message != "" {
		parts = append(parts, spec.NewTextPart(m.Message))
	}
	if len(m.Data) > 0 {
		if isJSON(m.DataType) && json.Valid(m.Data) {
			var v any
			if err := json.Unmarshal(m.Data, &v); err == nil {
				parts = append(parts, spec.NewDataPart(v))
			}
		}
		if len(parts) == 0 || parts[len(parts)-1].Data() == nil {
			p := spec.NewRawPart(m.Data)
			p.MediaType = m.DataType
			parts = append(parts, p)
		}
	}
	for _, f := range m.Files {
		parts = append(parts, spec.NewFileURLPart(spec.URL(f), ""))
	}
	if len(parts) == 0 {
		parts = append(parts, spec.NewTextPart(""))
	}
	return parts
}

// isJSON reports whether a data type is JSON: application/json or
// anything/anything+json.
func isJSON(dataType string) bool {
	mt, _, err := mime.ParseMediaType(dataType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// textOf joins the text parts of parts.
func textOf(parts spec.ContentParts) string {
	var b strings.Builder
	for _, p := range parts {
		if t := p.Text(); t != "" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(t)
		}
	}
	return b.String()
}

// stateFor maps an agent's error code to the task state it ends in:
// rejected when the agent refused the request as it is (the caller must
// change it), input-required (announced as auth-required) when the agent
// needs the caller to authenticate, canceled for a cancelled turn, failed
// for the rest (the agent or the cluster broke).
func stateFor(code codes.Code) spec.TaskState {
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.PermissionDenied, codes.Unimplemented, codes.AlreadyExists:
		return spec.TaskStateRejected
	case codes.Unauthenticated:
		return spec.TaskStateAuthRequired
	case codes.Canceled:
		return spec.TaskStateCanceled
	}
	return spec.TaskStateFailed
}

// errorMessage is the agent-role status message of a turn that failed
// with err: "<Code>: <message>", the code in its metadata.
func errorMessage(info spec.TaskInfoProvider, err error) *spec.Message {
	code := errs.Code(err)
	text := err.Error()
	var e *errs.Error
	if errors.As(err, &e) {
		text = e.Message()
	}
	m := spec.NewMessageForTask(spec.MessageRoleAgent, info, spec.NewTextPart(fmt.Sprintf("%s: %s", code, text)))
	m.Metadata = map[string]any{metaCode: code.String()}
	return m
}

// metaState is the metadata key, on a reply's artifact or status message,
// of the reply's state.
const metaState = "agentsilo.state"

// stateMap copies the reply's state into A2A metadata, if any.
func stateMap(m *grain.Message) map[string]any {
	if len(m.State) == 0 {
		return nil
	}
	st := make(map[string]any, len(m.State))
	for k, v := range maps.All(m.State) {
		st[k] = v
	}
	return map[string]any{metaState: st}
}

// carriedState is the state of the reply that left t waiting for input
// (its status message's, see stateMap), which the task's next turn is
// given back, as a gateway caller asks again with a reply's state; nil if
// there is none.
func carriedState(t *spec.Task) map[string]string {
	if t == nil || t.Status.Message == nil {
		return nil
	}
	out := map[string]string{}
	switch st := t.Status.Message.Metadata[metaState].(type) {
	case map[string]any: // as stored in etcd (JSON), or as made
		for k, v := range st {
			if s, ok := v.(string); ok {
				out[k] = s
			}
		}
	case map[string]string:
		maps.Copy(out, st)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// invalidParams is the A2A invalid-params error with a message, formatted
// as fmt.Errorf does: it keeps the errors of its %w operands.
func invalidParams(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return spec.NewError(fmt.Errorf("%w: %w", spec.ErrInvalidParams, err), err.Error())
}
