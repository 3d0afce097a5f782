package client

import (
	"math"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The SDK's result types: plain structs, converted from the wire at the
// edge of the package, so that a program using the SDK needs no protobuf
// package. Times are time.Time (zero: not set), durations time.Duration,
// counts int.

// Kind is a message's kind: KindRequest (Ask), KindOneWay (Send),
// KindEvent (Event) or KindResponse (a reply).
type Kind = grain.Kind

// The kinds of a Message. Ask, Send and Event set it; Broadcast sends an
// event when msg.Kind is KindEvent.
const (
	KindRequest  = grain.KindRequest
	KindOneWay   = grain.KindOneWay
	KindEvent    = grain.KindEvent
	KindResponse = grain.KindResponse
)

// Label is a message's content label (Message.Label): where its content
// comes from. The gateway makes a client's message LabelUserInput unless
// it is lower; a client passes on text it did not write with a lower
// label, and reads the label of every reply (see docs/trust.md).
type Label = grain.Label

// The content labels, from the most trusted to the least. A client may
// not send LabelSystem (PermissionDenied).
const (
	LabelSystem       = grain.LabelSystem
	LabelUserInput    = grain.LabelUserInput
	LabelAgentMessage = grain.LabelAgentMessage
	LabelToolRequest  = grain.LabelToolRequest
	LabelToolOutput   = grain.LabelToolOutput
)

// AgentInfo is an active agent, as Agents and AgentsOf list it.
type AgentInfo struct {
	// Address is the agent's canonical address, Type:owner:alias.
	Address string
	// Silo is the name of the silo hosting the activation.
	Silo string
	// ActivatedAt is when the activation started; LastActive when it
	// last handled a message.
	ActivatedAt, LastActive time.Time
	// MailboxDepth counts the messages waiting in its mailbox.
	MailboxDepth int
}

// Member is a silo of the cluster, as Members lists it.
type Member struct {
	Name string
	// GatewayAddr is where clients reach it; PeerAddr where silos do.
	GatewayAddr, PeerAddr string
	// State is what the answering silo knows of it: "alive", ...
	State string
	// Self is true for the silo whose gateway answered.
	Self bool
	// Activations counts the agents active on it.
	Activations int
}

// Reminder is a durable reminder of an agent, as Reminders lists it.
type Reminder struct {
	Name   string
	Period time.Duration
	// MessageType and Message are what each tick delivers.
	MessageType, Message string
	// Due is the next tick.
	Due time.Time
}

// AgentType is an agent type the cluster's silos host, as Types lists it.
type AgentType struct {
	// Name is the type's name, the first part of its agents' addresses.
	Name string
	// Description says what agents of the type do.
	Description string
	Skills      []Skill
	// Declared is true for a type declared without code (ApplyType).
	Declared bool
}

// Skill is one thing an agent type (or an outside agent) can do.
type Skill struct {
	// Name identifies the skill within its type; it is the message type
	// of a typed call (AskTyped).
	Name        string
	Description string
	// Tags are keywords to find the skill by; Examples are requests it
	// handles.
	Tags, Examples []string
	// InputSchema, if not empty, is the JSON Schema (as text) a request's
	// JSON data must match; OutputSchema that of the replies' data.
	InputSchema, OutputSchema string
	// Sensitive says a model agent's tool call of the skill waits for a
	// person's approval, or is refused, once the model has read untrusted
	// content (see docs/trust.md).
	Sensitive bool
}

// ACLRule is a rule of the cluster's access control list: owner and agent
// patterns (`*`, `prefix*` or a name), a caller pattern (`*`, `group:NAME`
// or a principal) and the permission it grants ("Message,Read", "All", ...).
type ACLRule struct {
	// ID is set by the cluster when the rule is added.
	ID                                        uint64
	OwnerPattern, AgentPattern, CallerPattern string
	Permission                                string
}

// Decision is ACL.Check's answer: whether the caller holds the permission,
// and why.
type Decision struct {
	Allowed bool
	// Reason is "own agent", "rule" or "default deny".
	Reason string
	// Rule is the rule that matched (Reason "rule"; else nil), at
	// Position (1 for the first; 0 for the seed rule that applies while
	// no rules are set).
	Rule     *ACLRule
	Position int
	// Granted is what the caller holds on the agent ("Message,Read").
	Granted string
}

// DirectoryEntry is an entry of the service directory: an agent type
// (Kind "type"), an outside A2A agent ("a2a") or an MCP server ("mcp").
type DirectoryEntry struct {
	// Name is the type's name or the outside entry's name.
	Name, Kind, Description string
	// URL is an outside entry's URL (an A2A agent's base or card URL, an
	// MCP server's endpoint).
	URL    string
	Skills []Skill
	// Tools are an MCP server's tools.
	Tools []DirectoryTool
	// Call is how to call it: an address pattern, e.g.
	// Planner:{owner}:{alias}, A2A:{owner}:weather, MCP:{owner}:files.
	Call string
	// LastSeen is when an outside entry last answered a refresh (zero:
	// never); LastError its last refresh's error, empty after a success.
	LastSeen  time.Time
	LastError string
	// Trust, ApprovedSkills and Principal are an outside A2A agent's (see
	// OutsideEntry); Trust is "act" unless set to "observe".
	Trust          string
	ApprovedSkills []string
	Principal      string
}

// DirectoryTool is a tool of an MCP server.
type DirectoryTool struct {
	Name, Description string
}

// DirectoryHit is a search's match: the entry and its BM25 score (higher
// is better).
type DirectoryHit struct {
	Entry DirectoryEntry
	Score float64
}

// OutsideEntry is what Directory.Add adds: an A2A agent or an MCP server
// outside the cluster.
type OutsideEntry struct {
	// Name names the entry, the alias it is called by (A2A:{owner}:Name,
	// MCP:{owner}:Name): [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}.
	Name string
	// Kind is "a2a" or "mcp".
	Kind string
	// URL is the A2A agent's base or card URL, or the MCP server's
	// streamable HTTP endpoint.
	URL string
	// Description, if set, replaces the card's.
	Description string
	// Headers are sent with every request to it (credentials); they are
	// kept in the cluster and never returned.
	Headers map[string]string
	// Skills are pinned: listed whatever the card says, and while it
	// cannot be fetched.
	Skills []Skill
	// Trust is an outside A2A agent's level: "observe" (every call a model
	// agent makes to it waits for a person's approval, and its own
	// requests to the cluster's agents are refused) or "act" (the default:
	// calls naming one of ApprovedSkills run without approval, others
	// wait; empty ApprovedSkills: every call runs). Principal is the
	// principal it calls the cluster as.
	Trust          string
	ApprovedSkills []string
	Principal      string
}

// PublishResult is what Publish did: the message's id, the subscriptions
// it was queued for, and whether its idempotency key had been published
// already (then nothing was queued again, and the id is the first's).
type PublishResult struct {
	ID            string
	Subscriptions int
	Duplicate     bool
}

// Publication is one message of Topics.PublishBatch: Message to Topic.
type Publication struct {
	Topic   string
	Message *Message
}

// BatchResult is one message's outcome in Topics.PublishBatch: Err nil
// and its PublishResult, or why it was not published.
type BatchResult struct {
	PublishResult
	Err error
}

// Subscription is a durable named subscription.
type Subscription struct {
	// ID is `owner:name`; Pattern is canonical, `owner:pattern`.
	ID, Pattern string
	// MaxAttempts bounds the deliveries of a message before it becomes a
	// dead letter.
	MaxAttempts int
	// Members are the agents that compete for its messages.
	Members []string
	// Backlog counts the messages queued and not yet acknowledged, as the
	// listing silo last saw them.
	Backlog int
	// InFlight counts the messages of the backlog being delivered now
	// (handed to an agent, not yet acknowledged or failed), as the listing
	// silo last saw them.
	InFlight int
	Created  time.Time
}

// DeadLetter is a message a subscription gave up on, with its reason,
// attempts, last error and the original message.
type DeadLetter struct {
	// ID names the dead letter within its subscription.
	ID, Subscription string
	// Message is the original message, as published (its Topic set).
	Message *Message
	// Reason is "poison: ..." (the handler declared it) or "attempts
	// exhausted"; LastError is the last delivery's error.
	Reason    string
	Attempts  int
	LastError string
	DeadAt    time.Time
	// Agent is the member that got the last delivery.
	Agent string
}

// asTime is t as a time.Time; the zero time if t is not set.
func asTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func agentInfos(as []*agentsilov1.ActivationInfo) []AgentInfo {
	out := make([]AgentInfo, len(as))
	for i, a := range as {
		out[i] = AgentInfo{Address: a.GetAddress(), Silo: a.GetSilo(), ActivatedAt: asTime(a.GetActivatedAt()),
			LastActive: asTime(a.GetLastActive()), MailboxDepth: int(a.GetMailboxDepth())}
	}
	return out
}

func members(ms []*agentsilov1.Member) []Member {
	out := make([]Member, len(ms))
	for i, m := range ms {
		out[i] = Member{Name: m.GetName(), GatewayAddr: m.GetGatewayAddr(), PeerAddr: m.GetPeerAddr(), State: m.GetState(),
			Self: m.GetSelf(), Activations: int(m.GetActivations())}
	}
	return out
}

func reminders(rs []*agentsilov1.ReminderInfo) []Reminder {
	out := make([]Reminder, len(rs))
	for i, r := range rs {
		out[i] = Reminder{Name: r.GetName(), Period: r.GetPeriod().AsDuration(), MessageType: r.GetMessageType(),
			Message: r.GetMessage(), Due: asTime(r.GetDue())}
	}
	return out
}

func agentTypes(ts []*agentsilov1.AgentType) []AgentType {
	out := make([]AgentType, len(ts))
	for i, t := range ts {
		out[i] = AgentType{Name: t.GetName(), Description: t.GetDescription(), Skills: skills(t.GetSkills()), Declared: t.GetDeclared()}
	}
	return out
}

func skills(ss []*agentsilov1.Skill) []Skill {
	if len(ss) == 0 {
		return nil
	}
	out := make([]Skill, len(ss))
	for i, s := range ss {
		out[i] = Skill{Name: s.GetName(), Description: s.GetDescription(), Tags: s.GetTags(), Examples: s.GetExamples(),
			InputSchema: s.GetInputSchema(), OutputSchema: s.GetOutputSchema(), Sensitive: s.GetSensitive()}
	}
	return out
}

func skillsToWire(ss []Skill) []*agentsilov1.Skill {
	out := make([]*agentsilov1.Skill, 0, len(ss))
	for _, s := range ss {
		out = append(out, &agentsilov1.Skill{Name: s.Name, Description: s.Description, Tags: s.Tags, Examples: s.Examples,
			InputSchema: s.InputSchema, OutputSchema: s.OutputSchema, Sensitive: s.Sensitive})
	}
	return out
}

// aclRule is r from the wire; nil if r is nil.
func aclRule(r *agentsilov1.AclRule) *ACLRule {
	if r == nil {
		return nil
	}
	return &ACLRule{ID: r.GetId(), OwnerPattern: r.GetOwnerPattern(), AgentPattern: r.GetAgentPattern(),
		CallerPattern: r.GetCallerPattern(), Permission: r.GetPermission()}
}

func (r ACLRule) wire() *agentsilov1.AclRule {
	return &agentsilov1.AclRule{Id: r.ID, OwnerPattern: r.OwnerPattern, AgentPattern: r.AgentPattern,
		CallerPattern: r.CallerPattern, Permission: r.Permission}
}

func directoryEntry(e *agentsilov1.DirectoryEntry) DirectoryEntry {
	out := DirectoryEntry{Name: e.GetName(), Kind: e.GetKind(), Description: e.GetDescription(), URL: e.GetUrl(),
		Skills: skills(e.GetSkills()), Call: e.GetCall(), LastSeen: asTime(e.GetLastSeen()), LastError: e.GetLastError(),
		Trust: e.GetTrust(), ApprovedSkills: e.GetApprovedSkills(), Principal: e.GetPrincipal()}
	for _, t := range e.GetTools() {
		out.Tools = append(out.Tools, DirectoryTool{Name: t.GetName(), Description: t.GetDescription()})
	}
	return out
}

func directoryEntries(es []*agentsilov1.DirectoryEntry) []DirectoryEntry {
	out := make([]DirectoryEntry, len(es))
	for i, e := range es {
		out[i] = directoryEntry(e)
	}
	return out
}

func subscription(s *agentsilov1.Subscription) Subscription {
	return Subscription{ID: s.GetId(), Pattern: s.GetPattern(), MaxAttempts: int(s.GetMaxAttempts()), Members: s.GetMembers(),
		Backlog: int(min(s.GetBacklog(), math.MaxInt)), InFlight: int(min(s.GetInFlight(), math.MaxInt)), Created: asTime(s.GetCreated())}
}

func deadLetter(d *agentsilov1.DeadLetter) DeadLetter {
	m := grain.MessageFromProto(d.GetMessage())
	if m == nil {
		m = &Message{} // never nil, so that a reader need not check
	}
	return DeadLetter{ID: d.GetId(), Subscription: d.GetSubscription(), Message: m, Reason: d.GetReason(),
		Attempts: int(d.GetAttempts()), LastError: d.GetLastError(), DeadAt: asTime(d.GetDeadAt()), Agent: d.GetAgent()}
}
