package client

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/agentsilo/agentsilo/errs"
)

// Conversations are the recorded conversations of model agents (package
// llm): read, listed by owner, and deleted, one or all of an owner's.
// Reach it with Client.Conversations. A model agent's conversation is its
// state, read and deleted through its typed skills conversation and
// forget; a model type is one with both.
type Conversations struct{ c *Client }

// Conversations returns the client's conversation calls.
func (c *Client) Conversations() Conversations { return Conversations{c} }

// The model agents' skills these calls use (llm.SkillConversation and
// llm.SkillForget; the client does not link package llm).
const (
	conversationSkill = "conversation"
	forgetSkill       = "forget"
)

// Get returns the model agent's recorded conversation, as JSON (it
// decodes into an llm.Conversation).
func (v Conversations) Get(ctx context.Context, agent string) (json.RawMessage, error) {
	return AskTyped[struct{}, json.RawMessage](ctx, v.c, agent, conversationSkill, struct{}{})
}

// Delete deletes the model agent's recorded conversation, between its
// turns (a turn in progress or waiting for approvals is
// FailedPrecondition, and nothing is deleted). It needs the agent's owner,
// or Configure on it.
func (v Conversations) Delete(ctx context.Context, agent string) error {
	_, err := AskTyped[struct{}, json.RawMessage](ctx, v.c, agent, forgetSkill, struct{}{})
	return err
}

// List returns the addresses of the model agents of owner that have a
// recorded conversation, active or not, by type then alias.
func (v Conversations) List(ctx context.Context, owner string) ([]string, error) {
	types, err := v.modelTypes(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range types {
		after := ""
		for {
			page, err := v.c.Agents().Stored(ctx, t, owner, After(after), Limit(maxStoredPage))
			if err != nil {
				return nil, err
			}
			out = append(out, page.Items...)
			if page.Next == "" {
				break
			}
			after = page.Next
		}
	}
	return out, nil
}

// maxStoredPage is the largest page of Agents.Stored.
const maxStoredPage = 10000

// DeleteAll deletes every recorded conversation of owner's model agents,
// and returns how many it deleted. It goes on past an agent it cannot
// delete (a turn in progress), and returns the first such error with the
// count of those deleted.
func (v Conversations) DeleteAll(ctx context.Context, owner string) (int, error) {
	agents, err := v.List(ctx, owner)
	if err != nil {
		return 0, err
	}
	n := 0
	var first error
	for _, a := range agents {
		if err := v.Delete(ctx, a); err != nil {
			if first == nil {
				first = errs.Wrap(errs.Code(err), err, "delete the conversation of %s: it may have run (%d of %d deleted; the others were tried all the same)", a, n, len(agents))
			}
			if ctx.Err() != nil {
				break
			}
			continue
		}
		n++
	}
	return n, first
}

// modelTypes returns the names of the types with the conversation and
// forget skills, sorted.
func (v Conversations) modelTypes(ctx context.Context) ([]string, error) {
	types, err := v.c.Admin().Types(ctx, "")
	if err != nil {
		return nil, errs.Wrap(errs.Code(err), err, "list the model agent types: the listing of conversations did not run")
	}
	var out []string
	for _, t := range types {
		has := func(name string) bool {
			return slices.ContainsFunc(t.Skills, func(s Skill) bool { return s.Name == name })
		}
		if has(conversationSkill) && has(forgetSkill) {
			out = append(out, t.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
