package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/llm"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The approvals page: the tool calls of an owner's model agents that wait
// for a person (see llm, "Approvals"), found in the records of the
// owner's model agents with stored state (ListAgents stored; a waiting
// turn's agent is usually not active), each with Approve and Deny. The
// decision is the agent's typed skill decide, asked on behalf of the
// signed-in principal: the agent's owner, or one the ACL grants Approve.

// approvalRow is one waiting tool call.
type approvalRow struct {
	ID, Agent, Tool, Arguments string
	Requested, Deadline        time.Time
}

// approvalsView is the approvals page's data.
type approvalsView struct {
	Owner  string
	Rows   []approvalRow
	Read   int // records read
	Capped bool
	Errors []string
}

func (d *Dashboard) approvalsData(ctx context.Context, s *session, r *http.Request) (any, error) {
	v := &approvalsView{Owner: clip(r.URL.Query().Get("owner"))}
	if v.Owner == "" {
		v.Owner = s.caller.Principal
	}
	if !grain.ValidName(v.Owner) {
		return v, errs.New(codes.InvalidArgument, "owner %q: want an owner", v.Owner)
	}
	types, err := d.modelTypes(ctx)
	if err != nil {
		return v, err
	}
	var agents []string
	for _, t := range types {
		resp, err := d.gw.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: t.GetName(), Owner: v.Owner, Stored: true, Limit: maxRecords})
		if err != nil {
			v.Errors = append(v.Errors, t.GetName()+": "+message(err))
			continue
		}
		for _, a := range resp.GetAgents() {
			agents = append(agents, a.GetAddress())
		}
	}
	if len(agents) > maxRecords {
		agents, v.Capped = agents[:maxRecords], true
	}
	for _, addr := range agents {
		var rec llm.Conversation
		if err := d.readRecord(ctx, addr, &rec); err != nil {
			v.Errors = append(v.Errors, addr+": "+message(err))
			continue
		}
		v.Read++
		if rec.Current == nil {
			continue
		}
		for _, ap := range rec.Current.Approvals {
			if ap.Decision == "" {
				v.Rows = append(v.Rows, approvalRow{ID: ap.ID, Agent: addr, Tool: ap.Call.Name, Arguments: clipRunes(ap.Call.Arguments, clipTool), Requested: ap.Requested, Deadline: ap.Deadline})
			}
		}
	}
	slices.SortFunc(v.Rows, func(a, b approvalRow) int { return a.Requested.Compare(b.Requested) })
	return v, nil
}

// decideApproval approves or denies the approval of the form's id, with
// its arguments (a JSON object, to run the call with instead) or its
// reason.
func (d *Dashboard) decideApproval(w http.ResponseWriter, r *http.Request, s *session) {
	d.act(w, r, s, func(ctx context.Context) (string, error) {
		id := clip(r.PostFormValue("id"))
		agent, _, ok := strings.Cut(id, "/")
		if !ok {
			return "", errs.New(codes.InvalidArgument, "approval %q: want an approval id, <agent>/<id>", id)
		}
		dec := llm.Decision{ID: id, Approve: r.PostFormValue("decision") == "approve", Reason: strings.TrimSpace(r.PostFormValue("reason"))}
		if args := strings.TrimSpace(r.PostFormValue("args")); args != "" && dec.Approve {
			if err := json.Unmarshal([]byte(args), &dec.Arguments); err != nil || dec.Arguments == nil {
				return "", errs.New(codes.InvalidArgument, "the arguments are not a JSON object; nothing was decided")
			}
		}
		data, err := json.Marshal(dec)
		if err != nil {
			return "", errs.Wrap(codes.Internal, err, "encode the decision")
		}
		resp, err := d.gw.Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: agent, MessageType: llm.SkillDecide, DataType: grain.JSONType, Data: data}})
		if err != nil {
			return "", err
		}
		var got llm.Decided
		if err := json.Unmarshal(resp.GetMessage().GetData(), &got); err != nil {
			return "", errs.Wrap(codes.Internal, err, "the agent's answer does not decode")
		}
		return fmt.Sprintf("%s %s (turn %s).", capitalize(got.Decision), got.ID, got.Turn), nil
	})
}

// capitalize is s with its first letter upper case.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
