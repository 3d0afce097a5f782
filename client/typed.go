package client

import (
	"context"
	"encoding/json"
	"mime"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// jsonType is the data type of typed skills' arguments and replies.
const jsonType = "application/json"

// AskTyped asks the agent at to for its typed skill named skill (as
// grain.AskTyped does from an agent's turn, which takes a Client too): in, as
// JSON, is the request's data (message_type = skill, data_type
// application/json), and the reply's JSON data is decoded into an Out.
// Arguments that do not match the skill's input schema are refused by the
// gateway with InvalidArgument before the agent runs. A reply without JSON
// data, or whose data does not decode as an Out, is Internal; use any as
// Out to take whatever JSON it is.
//
//	type PlanIn struct{ City string `json:"city"`; Days int `json:"days"` }
//	type PlanOut struct{ Steps []string `json:"steps"` }
//	out, err := client.AskTyped[PlanIn, PlanOut](ctx, c, "Planner:trips", "plan", PlanIn{City: "Rome", Days: 3})
func AskTyped[In, Out any](ctx context.Context, c *Client, to, skill string, in In) (Out, error) {
	var out Out
	data, err := json.Marshal(in)
	if err != nil {
		return out, errs.New(codes.InvalidArgument, "skill %s: encode the arguments (%T) as JSON: %w", skill, in, err)
	}
	r, err := c.Ask(ctx, to, &Message{MessageType: skill, DataType: jsonType, Data: data})
	if err != nil {
		return out, err
	}
	if len(r.Data) == 0 {
		return out, errs.New(codes.Internal, "skill %s of %s: the turn ran, but the reply has no JSON data (text %q)", skill, to, clipReply(r.Message))
	}
	if dt := r.DataType; dt != "" && !isJSONType(dt) {
		return out, errs.New(codes.Internal, "skill %s of %s: the turn ran, but the reply's data is %s, not JSON", skill, to, dt)
	}
	if err := json.Unmarshal(r.Data, &out); err != nil {
		return out, errs.New(codes.Internal, "skill %s of %s: the turn ran, but the reply does not decode as %T: %w", skill, to, out, err)
	}
	return out, nil
}

// isJSONType reports whether a data type is JSON: application/json or
// anything/anything+json.
func isJSONType(dataType string) bool {
	mt, _, err := mime.ParseMediaType(dataType)
	return err == nil && (mt == jsonType || strings.HasSuffix(mt, "+json"))
}

// clipReply shortens a reply's text for an error message.
func clipReply(s string) string {
	for i := range s {
		if i >= 100 {
			return s[:i] + "…"
		}
	}
	return s
}
