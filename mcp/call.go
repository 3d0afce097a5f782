package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"strings"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/inbox"
)

// A tool call is one turn of the agent it names, an Ask through the
// runtime on behalf of the caller:
//
//	the arguments are checked: the agent argument (every-agent endpoint),
//	    the input schema; then the ACL: Message on the agent
//	the request: message_type the skill's name, and the arguments as data
//	    (data_type application/json) or, for a skill without an input
//	    schema, the message text; its sender a fresh inbox address of the
//	    caller's principal (Session:<principal>:mcp-<id>@<silo>)
//	what the agent pushes to that address meanwhile becomes progress
//	    notifications, if the client sent a progress token
//	the reply: text content (its message text), and for JSON data
//	    (application/json or +json) the JSON as text and, if an object, as
//	    structured content; other data as text (text/*), an image, audio,
//	    or an embedded resource
//	an error of the turn: a result with isError, "<Code>: <message>"
//	the client's cancellation (notifications/cancelled, or the HTTP
//	    request that carries the call going away) cancels the Ask, and so
//	    the turn, on whichever silo it runs
//
// A call refused before any agent runs (bad arguments, the ACL) is a
// JSON-RPC error (see protocolError).

// toolHandler returns the SDK handler of t.
func (s *Server) toolHandler(t *tool) mcpsdk.ToolHandler {
	return func(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		res, err := s.call(ctx, t, req)
		if err != nil {
			return nil, protocolError(err)
		}
		return res, nil
	}
}

// call runs a call of t; an error refuses it.
func (s *Server) call(ctx context.Context, t *tool, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
	ri, ok := infoOf(req.Extra)
	if !ok {
		return nil, errs.New(codes.Unauthenticated, "no authenticated caller")
	}
	if ri.agent.Type != "" && ri.agent.Type != t.typ {
		return nil, errs.New(codes.InvalidArgument, "tool %s is not a tool of %s", t.name, ri.agent)
	}
	var raw json.RawMessage
	if req.Params != nil {
		raw = req.Params.Arguments
	}
	r, err := decodeArgs(t, ri.agent, raw, s.reg.ValidateInput)
	if err != nil {
		return nil, err
	}
	if sc := ri.caller.MissingScope(s.reg.RequiredScopes(t.typ, t.skill)); sc != "" {
		return nil, acl.ScopeDenied(ri.caller, sc, t.skill, r.agent.String())
	}
	if s.acl != nil {
		if err := s.acl.Authorize(ri.caller, r.agent.Type, r.agent.Owner, r.agent.Alias, acl.Message); err != nil {
			return nil, err
		}
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.running.Done()

	to, session := r.agent, ""
	if r.session && req.Session != nil && req.Session.ID() != "" {
		// The agent of this session's context (grain.ContextAddress).
		session = "mcp:" + req.Session.ID()
		to = grain.ContextAddress(r.agent, session)
	}
	box := s.inboxes.Open(ri.caller.Principal, inbox.MCP)
	defer s.inboxes.Close(box)
	msg := &grain.Message{
		To:          to.String(),
		From:        box.Addr(),
		OnBehalfOf:  ri.caller.Principal, // the principal of the call chain (see grain.Authorizer)
		Kind:        grain.KindRequest,
		MessageType: t.skill,
		Message:     r.text,
		// What an MCP client's model wrote, from outside the cluster, or
		// the lower label its _meta claims (see docs/trust.md).
		Label:   grain.LabelToolRequest,
		Outside: true,
	}
	if req.Params != nil {
		if l, ok := req.Params.Meta[grain.LabelKey]; ok {
			// A lower claim lowers it; a higher one counts for nothing;
			// a name this version does not know, as tool-output.
			name, _ := l.(string)
			claim, known := grain.ParseLabel(name)
			if !known {
				claim = grain.LabelToolOutput
			}
			msg.Label = msg.Label.Lower(claim)
		}
	}
	if r.data != nil {
		msg.DataType, msg.Data = "application/json", r.data
	}
	if to != r.agent {
		msg.State = map[string]string{grain.StateContext: session}
	}
	tctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	if req.Extra != nil {
		if tp := req.Extra.Header.Get("traceparent"); len(tp) == 55 {
			tctx = grain.WithTraceparent(tctx, tp) // a version-00 W3C trace context: the Ask continues it
		}
	}
	defer cancel()
	stop := context.AfterFunc(s.hard, cancel)
	defer stop()
	gone := context.AfterFunc(ri.http, cancel)
	defer gone()

	type result struct {
		reply *grain.Message
		err   error
	}
	done := make(chan result, 1)
	go func() {
		reply, err := s.rt.Ask(tctx, msg)
		s.record(tctx, t, ri.caller.Principal, msg, reply, err)
		done <- result{reply, err}
	}()
	var token any
	if req.Params != nil {
		token = req.Params.GetProgressToken()
	}
	progress := 0
	pushes := func() {
		for _, p := range box.Take() {
			if token == nil {
				continue
			}
			progress++
			// A notification that cannot be sent (the client went) is
			// not the turn's failure.
			if err := req.Session.NotifyProgress(ctx, &mcpsdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(progress), Message: pushText(p)}); err != nil {
				s.logger.Debug("mcp: progress notification not sent", "err", err)
			}
		}
	}
	for {
		select {
		case <-box.Signal():
			pushes()
		case res := <-done:
			pushes()
			if res.err != nil {
				if ctx.Err() != nil {
					// The client cancelled: nobody reads a result.
					return nil, errs.Wrap(codes.Canceled, context.Cause(ctx), "the call was cancelled")
				}
				return errorResult(res.err, s.hard.Err() != nil), nil
			}
			reply := res.reply
			for range maxElicitations {
				if reply.MessageType != typeInputRequired {
					break
				}
				next, asked, err := s.elicit(tctx, req, msg, reply)
				if !asked {
					break // the client takes no elicitation: the reply says what waits
				}
				if err != nil {
					return errorResult(err, s.hard.Err() != nil), nil
				}
				reply = next
			}
			return replyResult(reply), nil
		}
	}
}

// record records a tool call served in the audit, under a key of its
// own: one record per call, whatever its outcome. It is written in the
// background, the call's result not waiting for it; a record that cannot
// be written is logged, the call's outcome stands.
func (s *Server) record(ctx context.Context, t *tool, principal string, msg, reply *grain.Message, err error) {
	if !s.audit.Enabled() {
		return
	}
	r := audit.Record{
		Key:        "mcp/" + grain.NewID(),
		Kind:       audit.KindMCPCall,
		Principal:  principal,
		OnBehalfOf: []string{principal},
		Agent:      msg.To,
		Skill:      t.name,
		Trigger:    "mcp",
		Outcome:    audit.OutcomeOK,
	}
	if st := msg.State[grain.StateContext]; st != "" {
		r.Correlation = st
	}
	if err != nil {
		r.Outcome, r.Detail = audit.OutcomeError, errs.Code(err).String()+": "+err.Error()
	} else if mt := reply.MessageType; mt != "" {
		r.Detail = mt
	}
	s.audit.Go(ctx, r, func(aerr error) {
		s.logger.Error("audit: an MCP tool call served is not recorded", "tool", t.name, "err", aerr)
	})
}

// typeInputRequired is the message type of a reply that asks its caller
// for input (as A2A's input-required); stateApproval marks, in its state,
// one whose input is a decision on a model agent's tool calls (see
// package llm's approvals).
const (
	typeInputRequired = "input-required"
	stateApproval     = "llm.approval"
	// maxElicitations bounds the rounds of input one tool call asks for.
	maxElicitations = 8
)

// approvalSchema and answerSchema are what an elicitation asks the user
// for: a decision on an approval, or an answer to a question.
var (
	approvalSchema = map[string]any{"type": "object", "properties": map[string]any{
		"approve": map[string]any{"type": "boolean", "description": "run the tool call"},
		"reason":  map[string]any{"type": "string", "description": "why (given to the model with a denial)"},
	}, "required": []string{"approve"}}
	answerSchema = map[string]any{"type": "object", "properties": map[string]any{
		"answer": map[string]any{"type": "string"},
	}, "required": []string{"answer"}}
)

// elicit asks the client, with elicitation/create, for the input that
// reply, the answer to asked, requires, and sends it to the agent as its
// next message (carrying the reply's state back), returning the agent's
// reply to that. asked is false, and nothing is sent, when the client
// takes no elicitation, or declined to answer a question (not an
// approval, which a decline denies).
func (s *Server) elicit(ctx context.Context, req *mcpsdk.CallToolRequest, asked, reply *grain.Message) (*grain.Message, bool, error) {
	if p := req.Session.InitializeParams(); p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return nil, false, nil
	}
	_, approval := reply.State[stateApproval]
	schema := answerSchema
	if approval {
		schema = approvalSchema
	}
	res, err := req.Session.Elicit(ctx, &mcpsdk.ElicitParams{Message: reply.Message, RequestedSchema: schema})
	if err != nil {
		return nil, true, errs.Wrap(codes.Unavailable, err, "the client's answer to %s's question did not come; nothing was answered and the agent still waits", asked.To)
	}
	next := &grain.Message{To: asked.To, From: asked.From, OnBehalfOf: asked.OnBehalfOf, Kind: grain.KindRequest, State: maps.Clone(reply.State), Label: asked.Label, Outside: asked.Outside}
	delete(next.State, grain.StateProvisional)
	switch {
	case approval:
		d := map[string]any{"approve": false, "reason": "the MCP client " + res.Action + "d"}
		if res.Action == "accept" {
			d = map[string]any{"approve": res.Content["approve"] == true}
			if r, ok := res.Content["reason"].(string); ok && r != "" {
				d["reason"] = r
			}
		}
		data, err := json.Marshal(d)
		if err != nil {
			return nil, true, errs.Wrap(codes.Internal, err, "encode the decision; nothing was answered")
		}
		next.DataType, next.Data = "application/json", data
	case res.Action == "accept":
		next.Message, _ = res.Content["answer"].(string)
	default:
		return nil, false, nil
	}
	r, err := s.rt.Ask(ctx, next)
	return r, true, err
}

// errorResult is the result of a turn that failed with err.
func errorResult(err error, shutdown bool) *mcpsdk.CallToolResult {
	text := fmt.Sprintf("%s: %s", errs.Code(err), messageOf(err))
	if shutdown {
		text = "Unavailable: the silo shut down during the call"
	}
	return &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: text}}}
}

// isJSON reports whether a data type is JSON: application/json or a
// +json type, with any parameters.
func isJSON(dataType string) bool {
	mt, _, err := mime.ParseMediaType(dataType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// replyResult is the result of a turn that replied m.
func replyResult(m *grain.Message) *mcpsdk.CallToolResult {
	res := &mcpsdk.CallToolResult{Content: []mcpsdk.Content{}}
	if m == nil {
		return res
	}
	if l := m.Label.Name(); l != "" {
		// The reply's content label, for a client that keeps it apart
		// (see docs/trust.md).
		res.Meta = mcpsdk.Meta{grain.LabelKey: l}
		if m.Outside {
			res.Meta[grain.OutsideKey] = true
		}
	}
	if m.Message != "" {
		res.Content = append(res.Content, &mcpsdk.TextContent{Text: m.Message})
	}
	data, dt := m.Data, m.DataType
	if len(data) == 0 {
		return res
	}
	mt, _, _ := mime.ParseMediaType(dt)
	switch {
	case isJSON(dt) && json.Valid(data):
		res.Content = append(res.Content, &mcpsdk.TextContent{Text: string(data)})
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) == nil && obj != nil {
			res.StructuredContent = json.RawMessage(data)
		}
	case strings.HasPrefix(mt, "text/"):
		res.Content = append(res.Content, &mcpsdk.TextContent{Text: string(data)})
	case strings.HasPrefix(mt, "image/"):
		res.Content = append(res.Content, &mcpsdk.ImageContent{Data: data, MIMEType: mt})
	case strings.HasPrefix(mt, "audio/"):
		res.Content = append(res.Content, &mcpsdk.AudioContent{Data: data, MIMEType: mt})
	default:
		if mt == "" {
			mt = "application/octet-stream"
		}
		res.Content = append(res.Content, &mcpsdk.EmbeddedResource{Resource: &mcpsdk.ResourceContents{URI: "agentsilo:" + m.From, MIMEType: mt, Blob: data}})
	}
	return res
}

// pushText is the message of the progress notification of a push.
func pushText(p *grain.Message) string {
	switch {
	case p.Message != "":
		return p.Message
	case len(p.Data) > 0 && (isJSON(p.DataType) || strings.HasPrefix(p.DataType, "text/")):
		return string(p.Data)
	case len(p.Data) > 0:
		return fmt.Sprintf("%d bytes of %s", len(p.Data), p.DataType)
	}
	return p.MessageType
}
