package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"
	"strconv"
	"time"
)

// The kinds of records.
const (
	// KindToolCall: a model agent called one of its tools (an agent's
	// skill, an outside agent or an MCP server's tool as a tool).
	KindToolCall = "tool_call"
	// KindA2ATask: the silo's A2A server ran a task for a caller.
	KindA2ATask = "a2a_task"
	// KindMCPCall: the silo's MCP server ran a tool call for a caller.
	KindMCPCall = "mcp_call"
	// KindApproval: a tool call waited for a person; KindDecision: one
	// decided it.
	KindApproval = "approval"
	KindDecision = "decision"
	// KindACL: an ACL rule or group changed.
	KindACL = "acl"
	// KindDefinition: a declared type's definition was applied or deleted.
	KindDefinition = "definition"
	// KindConversationDelete, KindStateDelete: a model agent's
	// conversation, or an agent's state, was deleted.
	KindConversationDelete = "conversation_delete"
	KindStateDelete        = "state_delete"
)

// Outcomes.
const (
	OutcomeOK    = "ok"
	OutcomeError = "error"
)

// Record is one audited action.
type Record struct {
	// Partition and Seq place the record in its chain (set by the store).
	Partition string `json:"partition"`
	Seq       uint64 `json:"seq"`
	// Key identifies the action: a second record of the same key is not
	// written.
	Key  string    `json:"key"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Principal is who the action was for, as the silo authenticated it;
	// OnBehalfOf is the chain of callers it came through, the principal
	// first (agents that called agents after it).
	Principal  string   `json:"principal,omitempty"`
	OnBehalfOf []string `json:"on_behalf_of,omitempty"`
	// Agent is the agent that acted (or the pseudo-agent system:acl);
	// Skill the skill, tool or type it acted with.
	Agent string `json:"agent,omitempty"`
	Skill string `json:"skill,omitempty"`
	// Task and Correlation are the task (a model agent's turn, an A2A
	// task) and the id that ties the action to its request.
	Task        string `json:"task,omitempty"`
	Correlation string `json:"correlation,omitempty"`
	// Trigger is what started the work the action belongs to: request,
	// event, message, topic, schedule, a2a, mcp, admin.
	Trigger string `json:"trigger,omitempty"`
	// Decision is the approval decision the action ran under ("" if it
	// needed none): approved, denied, expired.
	Decision string `json:"decision,omitempty"`
	// Outcome is OutcomeOK or OutcomeError; Detail says more (an error's
	// code and text, clipped).
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	// Tokens are the model tokens the action's work used (a tool call's:
	// the turn's so far).
	Tokens int64 `json:"tokens,omitempty"`
	// Prev is the hash of the record before it in its partition (the
	// anchor's for the first); Hash is its own (Sum). Hex.
	Prev string `json:"prev"`
	Hash string `json:"hash"`
}

// Limits of a record's fields: longer text is clipped on Append.
const (
	maxField  = 512
	maxDetail = 2048
	maxChain  = 16
)

// Sum returns the record's hash: SHA-256 over its fields but Hash, each
// written in a fixed order as a length and its bytes, the time as Unix
// nanoseconds. Hex.
func (r *Record) Sum() string {
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	str := func(s string) {
		n := binary.PutUvarint(buf[:], uint64(len(s)))
		h.Write(buf[:n])
		h.Write([]byte(s))
	}
	num := func(v uint64) {
		n := binary.PutUvarint(buf[:], v)
		h.Write(buf[:n])
	}
	str("agentsilo.audit.v1")
	str(r.Partition)
	num(r.Seq)
	str(r.Key)
	num(uint64(r.Time.UnixNano()))
	str(r.Kind)
	str(r.Principal)
	num(uint64(len(r.OnBehalfOf)))
	for _, p := range r.OnBehalfOf {
		str(p)
	}
	str(r.Agent)
	str(r.Skill)
	str(r.Task)
	str(r.Correlation)
	str(r.Trigger)
	str(r.Decision)
	str(r.Outcome)
	str(r.Detail)
	num(uint64(r.Tokens))
	str(r.Prev)
	return hex.EncodeToString(h.Sum(nil))
}

// clean clips r's text fields to their bounds and sets its time in UTC.
func (r *Record) clean() {
	for _, f := range []*string{&r.Key, &r.Kind, &r.Principal, &r.Agent, &r.Skill, &r.Task, &r.Correlation, &r.Trigger, &r.Decision, &r.Outcome} {
		*f = clip(*f, maxField)
	}
	r.Detail = clip(r.Detail, maxDetail)
	if len(r.OnBehalfOf) > maxChain {
		r.OnBehalfOf = r.OnBehalfOf[:maxChain]
	}
	for i := range r.OnBehalfOf {
		r.OnBehalfOf[i] = clip(r.OnBehalfOf[i], maxField)
	}
	r.Time = r.Time.UTC().Round(0)
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}

// PartitionOf returns the partition of an agent's records among n: "p"
// and the agent's FNV-1a hash modulo n, two digits or more.
func PartitionOf(agent string, n int) string {
	if n <= 1 {
		return "p00"
	}
	h := fnv.New32a()
	h.Write([]byte(agent))
	s := strconv.Itoa(int(h.Sum32() % uint32(n)))
	if len(s) < 2 {
		s = "0" + s
	}
	return "p" + s
}

// Head is where a partition's chain stands: its last record's sequence
// number and hash, and its anchor (the last record retention removed; 0
// and "" if none was).
type Head struct {
	Partition  string `json:"partition"`
	Seq        uint64 `json:"seq"`
	Hash       string `json:"hash"`
	AnchorSeq  uint64 `json:"anchor_seq"`
	AnchorHash string `json:"anchor_hash"`
}
