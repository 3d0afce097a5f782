package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"sigs.k8s.io/yaml"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// Definition declares a model agent type: which model it thinks with, what
// it is told, which tools it may use and within which limits. Its JSON (or
// YAML) field names are the format users write definitions in:
//
//	type: Helper
//	description: Answers questions about orders.
//	model:
//	  provider: openai            # or anthropic
//	  base_url: https://api.openai.com/v1
//	  name: gpt-5.4-mini
//	  api_key_env: OPENAI_API_KEY
//	system_prompt: You help customers with their orders.
//	tools:
//	  - agent: Orders             # the typed skills of Orders agents
//	  - directory: true
//	  - memory: true
//	approval: [Orders_cancel]
//	sensitive: [Orders_refund]    # after untrusted content: approval
//	scopes: [orders:read]         # what a token's caller needs
//	limits:
//	  max_rounds: 8
//	  max_output_tokens: 4000
//	  timeout: 2m
//	  owner_daily_tokens: 200000
//	conversation:
//	  key: context                # each A2A context its own (or: agent)
//	  max_tokens: 8000            # earlier turns sent with each request
//	  trim: summarize             # or drop
//	  retention: 720h             # idle conversations deleted after
//	  shared: true                # the session's exchanges shared by such agents
//	schedule:
//	  - cron: "0 7 * * 1-5 Europe/Rome"
//	    message: summarise the orders opened yesterday
//	    owner: acme
type Definition struct {
	// Type is the agent type's name.
	Type string `json:"type"`
	// Description says what the agents of the type do.
	Description string `json:"description,omitempty"`
	// Model is the model the agents think with.
	Model Model `json:"model"`
	// SystemPrompt is the system prompt of every conversation.
	SystemPrompt string `json:"system_prompt,omitempty"`
	// Tools are what the model may call.
	Tools []ToolRef `json:"tools,omitempty"`
	// Approval names tools whose calls wait for a person's approval (see
	// "Approvals" in the package doc); each must be one of the agent's
	// tools.
	Approval []string `json:"approval,omitempty"`
	// Sensitive names tools that the model may not call, once it has read
	// untrusted content (a tool's output, or anything from outside the
	// cluster; see docs/trust.md), without a person's approval; each must
	// be one of the agent's tools. A skill whose TypeInfo marks it
	// (grain.Skill.Sensitive) is sensitive whatever this says.
	Sensitive []string `json:"sensitive,omitempty"`
	// OnUntrusted says what becomes of such a call: OnUntrustedApprove
	// ("approve", the default) parks it for a person's approval, as the
	// approval list's calls are; OnUntrustedRefuse ("refuse") does not run
	// it, and the model is told why.
	OnUntrusted string `json:"on_untrusted,omitempty"`
	// Scopes are the OAuth scopes a caller proven by a token of the
	// cluster's OpenID provider needs for every skill of the type
	// (grain.Skill.Scopes): without one, a call is PermissionDenied
	// naming it. Callers proven by API keys or certificates are bounded
	// by the ACL alone.
	Scopes []string `json:"scopes,omitempty"`
	// Limits bound each turn.
	Limits Limits `json:"limits,omitzero"`
	// Conversation says how much of the conversation the model is sent,
	// what becomes of older turns, and how long an idle conversation is
	// kept.
	Conversation ConversationSettings `json:"conversation,omitzero"`
	// Schedule is when the agents are asked without a caller: each entry's
	// message at its times, to its agent (see ScheduleEntry), through
	// durable reminders. A declared type's are registered when the
	// definition is applied (package cluster); ScheduleReminders lists
	// them for a program that registers its own.
	Schedule []ScheduleEntry `json:"schedule,omitempty"`
}

// The providers.
const (
	// ProviderOpenAI is any OpenAI-compatible chat completions API.
	ProviderOpenAI = "openai"
	// ProviderAnthropic is Anthropic's Messages API.
	ProviderAnthropic = "anthropic"
)

// Model names a model and where it is served.
type Model struct {
	// Provider is ProviderOpenAI or ProviderAnthropic.
	Provider string `json:"provider"`
	// BaseURL is the API's base URL; "" is the provider's own
	// (https://api.openai.com/v1, https://api.anthropic.com).
	BaseURL string `json:"base_url,omitempty"`
	// Name is the model's name, such as gpt-5.4-mini.
	Name string `json:"name"`
	// APIKeyEnv names the environment variable, on each silo, that holds
	// the API key; the key itself is never part of a definition. "" sends
	// no key (a local server that wants none).
	APIKeyEnv string `json:"api_key_env,omitempty"`
}

// ToolRef is one entry of a definition's tools: exactly one of its fields
// is set.
type ToolRef struct {
	// Agent names an agent type whose skills become tools: each typed
	// skill a tool named <Type>_<skill> (a type without typed skills, one
	// tool ask_<Type> taking text), the callee's owner:alias chosen by the
	// model as the argument "agent".
	Agent string `json:"agent,omitempty"`
	// Directory gives the model the directory's search and details tools.
	Directory bool `json:"directory,omitempty"`
	// Memory gives the model the working memory of its agent (put, get,
	// search).
	Memory bool `json:"memory,omitempty"`
	// MCP names an MCP server of the directory whose tools the model may
	// call.
	MCP string `json:"mcp,omitempty"`
	// A2A names an outside A2A agent of the directory the model may ask.
	A2A string `json:"a2a,omitempty"`
}

// Limits bound a turn: one request to the agent, answered after as many
// model calls and tool calls as it takes.
type Limits struct {
	// MaxRounds bounds the model calls of a turn (default 8, at most 100).
	MaxRounds int `json:"max_rounds,omitempty"`
	// MaxOutputTokens bounds the output tokens of a turn, summed over its
	// model calls (default 0: only each model's own limit; each call asks
	// for at most DefaultMaxTokens, or what is left of this).
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`
	// Timeout bounds a turn from its start, across restarts (default 5m,
	// at most 24h).
	Timeout Duration `json:"timeout,omitempty"`
	// OwnerDailyTokens bounds the tokens (input and output) that the
	// model calls of the agents of one owner spend in a day (UTC), summed
	// over every agent of the owner whose type sets a budget, counted
	// durably across silos (see BudgetType). Past it, a turn is refused
	// with ResourceExhausted, and a running one ends at its next model
	// call. 0: none (a silo's --llm-owner-daily-tokens gives its declared
	// types a budget all the same, and lowers a larger one).
	OwnerDailyTokens int64 `json:"owner_daily_tokens,omitempty"`
	// ApprovalTimeout is how long a tool call waits for a person's
	// decision (default 24h, at most 30 days); a turn's timeout does not
	// run while it waits. When it passes, the call is denied, or approved
	// if ApproveOnTimeout.
	ApprovalTimeout  Duration `json:"approval_timeout,omitempty"`
	ApproveOnTimeout bool     `json:"approve_on_timeout,omitempty"`
}

// ConversationSettings bound an agent's conversation over time (Limits
// bound a turn).
type ConversationSettings struct {
	// MaxTokens is the budget of the earlier turns sent to the model with
	// each request, in tokens estimated at one per four bytes of text (0:
	// no budget; the record's size bound still drops the oldest turns).
	// When a turn starts with more than that, the oldest turns go until
	// half the budget is left, as Trim says.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Trim is what becomes of the turns that go: TrimDrop (the default)
	// forgets them; TrimSummarize has the model fold them, with the
	// summary before, into a new summary (a model call of its own,
	// counted in the usage and recorded with the turn's first step),
	// which every later request carries after the system prompt.
	Trim string `json:"trim,omitempty"`
	// Key says what a conversation is kept by: KeyContext (the default)
	// makes each A2A context, and each MCP session whose client asks for
	// it, a conversation of its own, kept by an agent of its own
	// (grain.ContextAddress: the agent's alias, ".ctx" and a hash of the
	// context), while callers that name no context (the SDK, the CLI,
	// other agents) share the agent's own; KeyAgent keeps one
	// conversation for the agent whatever the context.
	Key string `json:"key,omitempty"`
	// Shared makes the conversations of one session (an A2A context, or
	// an MCP session that asks for its own) shared by every model agent
	// of the owner whose definition says so: each turn such an agent
	// ends in the session is kept, what it was asked and what it
	// answered, by the session's agent (SessionType), and every later
	// turn of another such agent in the session gets those exchanges
	// with its question, as context. Needs Key KeyContext.
	Shared bool `json:"shared,omitempty"`
	// Retention deletes a conversation that has had no turn for this long
	// (0: kept until deleted), at least a minute. A durable reminder,
	// registered when an activation ends, carries it.
	Retention Duration `json:"retention,omitempty"`
}

// What ConversationSettings.Trim may say.
const (
	TrimDrop      = "drop"
	TrimSummarize = "summarize"
)

// What ConversationSettings.Key may say.
const (
	KeyContext = "context"
	KeyAgent   = "agent"
)

// ScheduleEntry is a message an agent is asked at set times, without a
// caller: exactly one of Every and Cron says when.
type ScheduleEntry struct {
	// Every is a period, at least a minute: the first turn one period
	// after the schedule is registered, then one every period.
	Every Duration `json:"every,omitempty"`
	// Cron is a cron expression with an optional IANA time zone, such as
	// "0 7 * * 1-5 Europe/Rome" (UTC if none): minute, hour, day of
	// month, month, day of week.
	Cron string `json:"cron,omitempty"`
	// Message is the text the agent is asked.
	Message string `json:"message"`
	// Alias is the agent asked (default DefaultScheduleAlias).
	Alias string `json:"alias,omitempty"`
	// Owner owns the agent asked, Type:Owner:Alias, whose rights the
	// scheduled turns have and whose budget they spend. A declared type's
	// entry without one gets the principal who applied the definition.
	Owner string `json:"owner,omitempty"`
}

// MaxScheduleMessage bounds a schedule entry's message (it travels in
// its reminder).
const MaxScheduleMessage = 16 << 10

// Defaults and bounds of Limits.
const (
	DefaultMaxRounds       = 8
	MaxMaxRounds           = 100
	DefaultTimeout         = 5 * time.Minute
	MaxTimeout             = 24 * time.Hour
	DefaultApprovalTimeout = 24 * time.Hour
	MaxApprovalTimeout     = 30 * 24 * time.Hour
	// DefaultMaxTokens is the most output tokens asked of one model call
	// when the definition sets no max_output_tokens (Anthropic's API needs
	// a number).
	DefaultMaxTokens = 4096
)

// Duration is a time.Duration written as Go writes durations ("90s",
// "2m30s") in JSON and YAML.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return durationError{fmt.Errorf("want a duration such as \"90s\" or \"2m\", got %s", clipText(string(b), 40))}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return durationError{fmt.Errorf("want a duration such as \"90s\" or \"2m\": %w", err)}
	}
	*d = Duration(v)
	return nil
}

// ParseDefinition decodes a definition from YAML or JSON (JSON is YAML),
// refusing fields it does not know, and validates it. Errors are
// InvalidArgument naming the field.
func ParseDefinition(data []byte) (Definition, error) {
	var d Definition
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return d, errs.Wrap(codes.InvalidArgument, err, "definition: not YAML or JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Definition{}, errs.Wrap(codes.InvalidArgument, err, "definition: %s", decodeProblem(js, err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Definition{}, errs.New(codes.InvalidArgument, "definition: more than one document")
	}
	if err := d.Validate(); err != nil {
		return Definition{}, err
	}
	return d, nil
}

// decodeProblem names the field of a definition that does not decode,
// where it can (encoding/json names it for a value of the wrong type; a
// bad duration is looked for where durations are).
func decodeProblem(js []byte, err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %s: want %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	var de durationError
	if errors.As(err, &de) {
		var raw struct {
			Limits struct {
				Timeout         json.RawMessage `json:"timeout"`
				ApprovalTimeout json.RawMessage `json:"approval_timeout"`
			} `json:"limits"`
			Schedule []struct {
				Every json.RawMessage `json:"every"`
			} `json:"schedule"`
		}
		if json.Unmarshal(js, &raw) == nil {
			var d Duration
			if raw.Limits.Timeout != nil && d.UnmarshalJSON(raw.Limits.Timeout) != nil {
				return "field limits.timeout"
			}
			if raw.Limits.ApprovalTimeout != nil && d.UnmarshalJSON(raw.Limits.ApprovalTimeout) != nil {
				return "field limits.approval_timeout"
			}
			for i, e := range raw.Schedule {
				if e.Every != nil && d.UnmarshalJSON(e.Every) != nil {
					return fmt.Sprintf("field schedule[%d].every", i)
				}
			}
		}
	}
	return "does not decode"
}

// durationError is a Duration's decoding error.
type durationError struct{ error }

func (e durationError) Unwrap() error { return e.error }

// toolName is what function names may be in both APIs.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate checks d; errors are InvalidArgument naming the field.
func (d *Definition) Validate() error {
	bad := func(field, format string, args ...any) error {
		return errs.New(codes.InvalidArgument, "definition %s: %s: %s", clipText(d.Type, 64), field, fmt.Sprintf(format, args...))
	}
	if !grain.ValidType(d.Type) {
		return errs.New(codes.InvalidArgument, "definition: type: %q is not a type name ([A-Za-z][A-Za-z0-9_.-]{0,63})", clipText(d.Type, 80))
	}
	if d.Type == grain.SessionType {
		return bad("type", "%q is reserved", d.Type)
	}
	switch d.Model.Provider {
	case ProviderOpenAI, ProviderAnthropic:
	case "":
		return bad("model.provider", "missing (want %q or %q)", ProviderOpenAI, ProviderAnthropic)
	default:
		return bad("model.provider", "unknown provider %q (want %q or %q)", clipText(d.Model.Provider, 40), ProviderOpenAI, ProviderAnthropic)
	}
	if strings.TrimSpace(d.Model.Name) == "" {
		return bad("model.name", "missing")
	}
	if u := d.Model.BaseURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return bad("model.base_url", "%q is not an http or https URL", clipText(u, 80))
	}
	if e := d.Model.APIKeyEnv; e != "" && !envName.MatchString(e) {
		return bad("model.api_key_env", "%q is not an environment variable's name (the key itself belongs in the silo's environment, not in the definition)", clipText(e, 12))
	}
	seen := make(map[string]bool)
	for i, t := range d.Tools {
		field := fmt.Sprintf("tools[%d]", i)
		n := 0
		for _, set := range []bool{t.Agent != "", t.Directory, t.Memory, t.MCP != "", t.A2A != ""} {
			if set {
				n++
			}
		}
		switch {
		case n == 0:
			return bad(field, "names no tool (want one of agent, directory, memory, mcp, a2a)")
		case n > 1:
			return bad(field, "names more than one kind of tool; give each its own entry")
		case t.Agent != "" && !grain.ValidType(t.Agent):
			return bad(field+".agent", "%q is not a type name", clipText(t.Agent, 80))
		}
		key := fmt.Sprintf("%s|%t|%t|%s|%s", t.Agent, t.Directory, t.Memory, t.MCP, t.A2A)
		if seen[key] {
			return bad(field, "repeats an earlier entry")
		}
		seen[key] = true
	}
	for i, name := range d.Approval {
		if !toolName.MatchString(name) {
			return bad(fmt.Sprintf("approval[%d]", i), "%q is not a tool name ([A-Za-z0-9_-]{1,64})", clipText(name, 80))
		}
	}
	for i, name := range d.Sensitive {
		if !toolName.MatchString(name) {
			return bad(fmt.Sprintf("sensitive[%d]", i), "%q is not a tool name ([A-Za-z0-9_-]{1,64})", clipText(name, 80))
		}
	}
	switch d.OnUntrusted {
	case "", OnUntrustedApprove, OnUntrustedRefuse:
	default:
		return bad("on_untrusted", "%q is neither %q nor %q", clipText(d.OnUntrusted, 80), OnUntrustedApprove, OnUntrustedRefuse)
	}
	for i, sc := range d.Scopes {
		if sc == "" || len(sc) > 256 || strings.ContainsAny(sc, " \t\r\n\"\\") {
			return bad(fmt.Sprintf("scopes[%d]", i), "%q is not a scope (printable, without spaces, quotes or backslashes)", clipText(sc, 80))
		}
	}
	l := d.Limits
	switch {
	case l.MaxRounds < 0 || l.MaxRounds > MaxMaxRounds:
		return bad("limits.max_rounds", "%d is out of range (1 to %d; 0 is the default, %d)", l.MaxRounds, MaxMaxRounds, DefaultMaxRounds)
	case l.MaxOutputTokens < 0:
		return bad("limits.max_output_tokens", "%d is negative", l.MaxOutputTokens)
	case l.Timeout < 0 || time.Duration(l.Timeout) > MaxTimeout:
		return bad("limits.timeout", "%v is out of range (up to %v; 0 is the default, %v)", time.Duration(l.Timeout), MaxTimeout, DefaultTimeout)
	case l.OwnerDailyTokens < 0:
		return bad("limits.owner_daily_tokens", "%d is negative", l.OwnerDailyTokens)
	case l.ApprovalTimeout < 0 || time.Duration(l.ApprovalTimeout) > MaxApprovalTimeout:
		return bad("limits.approval_timeout", "%v is out of range (up to %v; 0 is the default, %v)", time.Duration(l.ApprovalTimeout), MaxApprovalTimeout, DefaultApprovalTimeout)
	}
	switch c := d.Conversation; {
	case c.MaxTokens < 0:
		return bad("conversation.max_tokens", "%d is negative", c.MaxTokens)
	case c.Key != "" && c.Key != KeyContext && c.Key != KeyAgent:
		return bad("conversation.key", "%q is not %q or %q", clipText(c.Key, 40), KeyContext, KeyAgent)
	case c.Shared && c.Key == KeyAgent:
		return bad("conversation.shared", "a conversation shared by the agents of a session is kept by context: key %q, not %q", KeyContext, KeyAgent)
	case c.Trim != "" && c.Trim != TrimDrop && c.Trim != TrimSummarize:
		return bad("conversation.trim", "%q is not %q or %q", clipText(c.Trim, 40), TrimDrop, TrimSummarize)
	case c.Retention < 0 || (c.Retention > 0 && time.Duration(c.Retention) < time.Minute):
		return bad("conversation.retention", "%v is under a minute (0 keeps conversations until deleted)", time.Duration(c.Retention))
	}
	entries := make(map[string]int)
	for i, s := range d.Schedule {
		field := fmt.Sprintf("schedule[%d]", i)
		switch {
		case s.Every != 0 && s.Cron != "", s.Every == 0 && strings.TrimSpace(s.Cron) == "":
			return bad(field, "give exactly one of every (a period) and cron (a cron expression)")
		case s.Every != 0 && time.Duration(s.Every) < time.Minute:
			return bad(field+".every", "%v is under a minute", time.Duration(s.Every))
		case strings.TrimSpace(s.Message) == "":
			return bad(field+".message", "missing")
		case len(s.Message) > MaxScheduleMessage:
			return bad(field+".message", "%d bytes, over %d", len(s.Message), MaxScheduleMessage)
		case s.Alias != "" && !validAlias.MatchString(s.Alias):
			return bad(field+".alias", "%q is not an alias", clipText(s.Alias, 80))
		case s.Owner != "" && !validAlias.MatchString(s.Owner):
			return bad(field+".owner", "%q is not an owner ([A-Za-z0-9][A-Za-z0-9_.@-]{0,127})", clipText(s.Owner, 80))
		}
		if s.Cron != "" {
			if _, err := parseCron(s.Cron); err != nil {
				return errs.Wrap(codes.InvalidArgument, err, "definition %s: %s.cron", clipText(d.Type, 64), field)
			}
		}
		key := s.Owner + "|" + s.alias() + "|" + s.reminderName()
		if j, ok := entries[key]; ok {
			return bad(field, "repeats schedule[%d] (the same times and message for the same agent)", j)
		}
		entries[key] = i
	}
	return nil
}

var (
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	validAlias = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`)
)

// maxRounds, timeout: the limits with their defaults.
func (l Limits) maxRounds() int {
	if l.MaxRounds == 0 {
		return DefaultMaxRounds
	}
	return l.MaxRounds
}

func (l Limits) approvalTimeout() time.Duration {
	if l.ApprovalTimeout == 0 {
		return DefaultApprovalTimeout
	}
	return time.Duration(l.ApprovalTimeout)
}

func (l Limits) timeout() time.Duration {
	if l.Timeout == 0 {
		return DefaultTimeout
	}
	return time.Duration(l.Timeout)
}

// clipText shortens s to n bytes at most, at a rune's start.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "..."
}
