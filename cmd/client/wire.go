package main

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The SDK's types back in their wire form, which -o json prints with
// protojson: the JSON stays that of the gateway's responses
// (testdata/listings.golden pins it). A time the gateway always sets is
// always set here; one it may leave unset (a directory entry's last seen)
// is unset when zero.

func wireAgents(as []client.AgentInfo) []*agentsilov1.ActivationInfo {
	out := make([]*agentsilov1.ActivationInfo, len(as))
	for i, a := range as {
		out[i] = &agentsilov1.ActivationInfo{Address: a.Address, Silo: a.Silo, ActivatedAt: timestamppb.New(a.ActivatedAt),
			LastActive: timestamppb.New(a.LastActive), MailboxDepth: uint32(a.MailboxDepth)}
	}
	return out
}

func wireMembers(ms []client.Member) []*agentsilov1.Member {
	out := make([]*agentsilov1.Member, len(ms))
	for i, m := range ms {
		out[i] = &agentsilov1.Member{Name: m.Name, GatewayAddr: m.GatewayAddr, PeerAddr: m.PeerAddr, State: m.State,
			Self: m.Self, Activations: uint32(m.Activations)}
	}
	return out
}

func wireReminders(rs []client.Reminder) []*agentsilov1.ReminderInfo {
	out := make([]*agentsilov1.ReminderInfo, len(rs))
	for i, r := range rs {
		out[i] = &agentsilov1.ReminderInfo{Name: r.Name, Period: durationpb.New(r.Period), MessageType: r.MessageType,
			Message: r.Message, Due: timestamppb.New(r.Due)}
	}
	return out
}

func wireTypes(ts []client.AgentType) []*agentsilov1.AgentType {
	out := make([]*agentsilov1.AgentType, len(ts))
	for i, t := range ts {
		out[i] = &agentsilov1.AgentType{Name: t.Name, Description: t.Description, Skills: wireSkills(t.Skills), Declared: t.Declared}
	}
	return out
}

func wireSkills(ss []client.Skill) []*agentsilov1.Skill {
	var out []*agentsilov1.Skill
	for _, s := range ss {
		out = append(out, &agentsilov1.Skill{Name: s.Name, Description: s.Description, Tags: s.Tags, Examples: s.Examples,
			InputSchema: s.InputSchema, OutputSchema: s.OutputSchema, Sensitive: s.Sensitive})
	}
	return out
}

// wireRule is r's wire form; nil if r is nil.
func wireRule(r *client.ACLRule) *agentsilov1.AclRule {
	if r == nil {
		return nil
	}
	return &agentsilov1.AclRule{Id: r.ID, OwnerPattern: r.OwnerPattern, AgentPattern: r.AgentPattern,
		CallerPattern: r.CallerPattern, Permission: r.Permission}
}

func wireRules(rs []client.ACLRule) []*agentsilov1.AclRule {
	out := make([]*agentsilov1.AclRule, len(rs))
	for i := range rs {
		out[i] = wireRule(&rs[i])
	}
	return out
}

func wireDecision(d client.Decision) *agentsilov1.CheckResponse {
	return &agentsilov1.CheckResponse{Allowed: d.Allowed, Reason: d.Reason, Rule: wireRule(d.Rule), Position: int32(d.Position), Granted: d.Granted}
}

func wireEntry(e client.DirectoryEntry) *agentsilov1.DirectoryEntry {
	out := &agentsilov1.DirectoryEntry{Name: e.Name, Kind: e.Kind, Description: e.Description, Url: e.URL,
		Skills: wireSkills(e.Skills), Call: e.Call, LastSeen: wireOptionalTime(e.LastSeen), LastError: e.LastError,
		Trust: e.Trust, ApprovedSkills: e.ApprovedSkills, Principal: e.Principal}
	for _, t := range e.Tools {
		out.Tools = append(out.Tools, &agentsilov1.DirectoryTool{Name: t.Name, Description: t.Description})
	}
	return out
}

func wireEntries(es []client.DirectoryEntry) []*agentsilov1.DirectoryEntry {
	out := make([]*agentsilov1.DirectoryEntry, len(es))
	for i, e := range es {
		out[i] = wireEntry(e)
	}
	return out
}

func wireHits(hs []client.DirectoryHit) []*agentsilov1.DirectoryHit {
	out := make([]*agentsilov1.DirectoryHit, len(hs))
	for i, h := range hs {
		out[i] = &agentsilov1.DirectoryHit{Entry: wireEntry(h.Entry), Score: h.Score}
	}
	return out
}

func wireSubscription(s client.Subscription) *agentsilov1.Subscription {
	return &agentsilov1.Subscription{Id: s.ID, Pattern: s.Pattern, MaxAttempts: uint32(s.MaxAttempts), Members: s.Members,
		Backlog: uint64(max(s.Backlog, 0)), InFlight: uint64(max(s.InFlight, 0)), Created: wireOptionalTime(s.Created)}
}

func wireSubscriptions(ss []client.Subscription) []*agentsilov1.Subscription {
	out := make([]*agentsilov1.Subscription, len(ss))
	for i, s := range ss {
		out[i] = wireSubscription(s)
	}
	return out
}

func wireDeadLetters(ds []client.DeadLetter) []*agentsilov1.DeadLetter {
	out := make([]*agentsilov1.DeadLetter, len(ds))
	for i, d := range ds {
		out[i] = &agentsilov1.DeadLetter{Id: d.ID, Subscription: d.Subscription, Message: grain.MessageToProto(d.Message), Reason: d.Reason,
			Attempts: uint32(d.Attempts), LastError: d.LastError, DeadAt: timestamppb.New(d.DeadAt), Agent: d.Agent}
	}
	return out
}

// wireOptionalTime is t on the wire; unset if t is zero.
func wireOptionalTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
