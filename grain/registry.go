package grain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/names"
)

// TypeInfo describes a registered agent type: what it is for, the skills
// it offers (for clients and other agents that choose an agent by what it
// can do), and settings of its activations that override the silo's. Give
// one to Registry.Register; Registry.Types returns them.
type TypeInfo struct {
	// Name is the type name. Register fills it in; if set, it must be the
	// name registered.
	Name string
	// Description says what agents of the type do, in a sentence or two.
	Description string
	// Skills are what the type can do, by name; names are unique in a type.
	Skills []Skill
	// MailboxSize, if not 0, bounds the mailbox of each activation of the
	// type instead of Config.MailboxSize.
	MailboxSize int
	// IdleTimeout, if not 0, deactivates an activation of the type that had
	// no message for this long instead of Config.IdleTimeout.
	IdleTimeout time.Duration
	// PerContext makes each conversation context a caller names an agent
	// of its own: a message that an A2A client sends to an agent of the
	// type within a contextId (or an MCP client within a session, when it
	// asks) goes to ContextAddress(agent, context) instead, so that the
	// contexts of one agent run apart, each with its own state (a model
	// agent's conversation per context). Like Skill.Interleave, it stays
	// on the silo.
	PerContext bool
}

// StateContext is the key, in a message's State, of the conversation
// context that the edge which sent it to a context's agent
// (ContextAddress) routed it by: an A2A contextId, an MCP session.
const StateContext = "agentsilo.context"

// ContextAddress is the address of the agent that keeps the context key
// of the agent at a (see TypeInfo.PerContext): of a's type and owner,
// its alias a's followed by ".ctx" and 16 hex digits of a hash of a's
// alias and key. The ACL treats it as a: a rule on a's alias decides for
// each of its contexts. An empty key, a context address, or an alias too
// long to take the suffix (over 108 bytes) has no contexts: a itself.
func ContextAddress(a Address, key string) Address {
	const suffix = len(names.ContextMark) + 16
	if key == "" || len(a.Alias) > 128-suffix || names.BaseAlias(a.Alias) != a.Alias {
		return a
	}
	h := sha256.Sum256([]byte(a.Alias + "\x00" + key))
	return Address{Type: a.Type, Owner: a.Owner, Alias: a.Alias + names.ContextMark + hex.EncodeToString(h[:8])}
}

// BaseAddress is the address whose context a is, if a is a context's
// (ContextAddress), else a.
func BaseAddress(a Address) Address {
	a.Alias = names.BaseAlias(a.Alias)
	return a
}

// Skill is one thing an agent type can do (after A2A's AgentSkill).
type Skill struct {
	// Name identifies the skill within its type: not empty, unique.
	Name string
	// Description says what the skill does.
	Description string
	// Tags are keywords to find the skill by, e.g. "planning".
	Tags []string
	// Examples are requests the skill handles, e.g. "plan a trip to Rome".
	Examples []string
	// InputSchema, if not empty, is a JSON Schema object that the JSON
	// arguments of a request for the skill (message_type = the skill's name,
	// data_type "application/json") must match; the gateway, A2A and MCP
	// refuse others with InvalidArgument before any agent runs. TypedSkill
	// derives it from a Go type.
	InputSchema json.RawMessage
	// OutputSchema, if not empty, is a JSON Schema object describing the JSON
	// data of the skill's replies (for cards and tool listings; replies are
	// not checked against it).
	OutputSchema json.RawMessage
	// Interleave makes the skill's requests run even while the agent is in
	// a turn, beside it, as Orleans' [AlwaysInterleave] methods do: for a
	// read of what a long turn has done so far (a model agent's
	// conversation). Such a request (a REQUEST whose message_type is the
	// skill's name) is not queued in the mailbox and is no turn of its own:
	// its OnMessage runs concurrently with the turn in progress, and with
	// other interleaving requests, so the agent guards what it reads and
	// writes (a mutex) and calls no turn-only Host method (RegisterTimer,
	// StopTimer). See docs/agents.md, "Interleaving skills", for the rest
	// of the contract. The flag stays on the silo: the wire form of a type
	// (TypeInfo.Proto) does not carry it.
	Interleave bool
	// Approval says a call of the skill by a model agent's tool waits for
	// a person's approval (see package llm, "Approvals"), whatever the
	// model agent's definition says. Like Interleave, it stays on the
	// silo: a type known only from the directory does not carry it.
	Approval bool
	// Sensitive says a model agent's tool call of the skill waits for a
	// person's approval once the model has read untrusted content (a
	// tool's output, or anything from outside the cluster; see package
	// llm and docs/trust.md), whatever the model agent's definition says.
	// Unlike Approval, it travels with the type's wire form: a model agent
	// on another silo, which knows the type from the directory, keeps it.
	Sensitive bool
	// Scopes are the OAuth scopes a caller proven by a token of the
	// cluster's OpenID provider must hold to call the skill (a request
	// whose message_type is the skill's name): the gateway, A2A and MCP
	// refuse a token without one of them with PermissionDenied naming it,
	// before any agent runs, beside the ACL's check. Callers proven
	// otherwise (API keys, client certificates) are bounded by the ACL
	// alone. A2A cards and MCP's protected resource metadata show them.
	// Like Interleave, they stay on the silo.
	Scopes []string

	// schemaErr is why TypedSkill could not infer a schema; Register
	// reports it.
	schemaErr error
}

// Interleaving returns s with Interleave set, for a skill declared in one
// expression:
//
//	grain.TypedSkill[struct{}, Status]("status", "What the agent is doing.").Interleaving()
func (s Skill) Interleaving() Skill {
	s.Interleave = true
	return s
}

// NeedsApproval returns s with Approval set:
//
//	grain.TypedSkill[Transfer, Receipt]("transfer", "Move money.").NeedsApproval()
func (s Skill) NeedsApproval() Skill {
	s.Approval = true
	return s
}

// MarkSensitive returns s with Sensitive set:
//
//	grain.TypedSkill[Payment, Receipt]("pay", "Pay an invoice.").MarkSensitive()
func (s Skill) MarkSensitive() Skill {
	s.Sensitive = true
	return s
}

// HasTag reports whether one of the type's skills carries tag (ignoring case).
func (ti TypeInfo) HasTag(tag string) bool {
	for _, s := range ti.Skills {
		for _, t := range s.Tags {
			if strings.EqualFold(t, tag) {
				return true
			}
		}
	}
	return false
}

func (ti TypeInfo) clone() TypeInfo {
	ti.Skills = slices.Clone(ti.Skills)
	for i := range ti.Skills {
		ti.Skills[i].Tags = slices.Clone(ti.Skills[i].Tags)
		ti.Skills[i].Examples = slices.Clone(ti.Skills[i].Examples)
		ti.Skills[i].InputSchema = slices.Clone(ti.Skills[i].InputSchema)
		ti.Skills[i].OutputSchema = slices.Clone(ti.Skills[i].OutputSchema)
		ti.Skills[i].Scopes = slices.Clone(ti.Skills[i].Scopes)
	}
	return ti
}

// validScope reports whether s is a scope token (RFC 6749 §3.3).
func validScope(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// RequiredScopes returns the scopes a call of skill of typeName needs
// (Skill.Scopes): nil if the type is not registered here or the skill
// requires none. The slice is the registry's: callers must not change
// it. It costs one atomic load while no registered skill requires a
// scope.
func (r *Registry) RequiredScopes(typeName, skill string) []string {
	if r.scoped.Load() == 0 {
		return nil
	}
	e := r.lookup(typeName)
	if e == nil || e.scopes == nil {
		return nil
	}
	return e.scopes[skill]
}

func (ti TypeInfo) validate(typeName string) error {
	switch {
	case ti.Name != "" && ti.Name != typeName:
		return errs.New(codes.InvalidArgument, "agent type %q: TypeInfo names another type, %q", typeName, clip(ti.Name))
	case ti.MailboxSize < 0:
		return errs.New(codes.InvalidArgument, "agent type %q: MailboxSize %d is negative", typeName, ti.MailboxSize)
	case ti.IdleTimeout < 0:
		return errs.New(codes.InvalidArgument, "agent type %q: IdleTimeout %v is negative", typeName, ti.IdleTimeout)
	}
	seen := make(map[string]bool, len(ti.Skills))
	for i, s := range ti.Skills {
		if strings.TrimSpace(s.Name) == "" {
			return errs.New(codes.InvalidArgument, "agent type %q: skill %d has no name", typeName, i+1)
		}
		if seen[s.Name] {
			return errs.New(codes.InvalidArgument, "agent type %q: skill %q appears twice", typeName, clip(s.Name))
		}
		seen[s.Name] = true
		if s.schemaErr != nil {
			return errs.New(codes.InvalidArgument, "agent type %q: skill %q: no JSON Schema for its %w", typeName, clip(s.Name), s.schemaErr)
		}
		for _, t := range s.Tags {
			if strings.TrimSpace(t) == "" {
				return errs.New(codes.InvalidArgument, "agent type %q: skill %q has an empty tag", typeName, clip(s.Name))
			}
		}
		for _, sc := range s.Scopes {
			if !validScope(sc) {
				return errs.New(codes.InvalidArgument, "agent type %q: skill %q: scope %q: want printable ASCII without spaces, quotes or backslashes", typeName, clip(s.Name), clip(sc))
			}
		}
		if err := checkSchemaObject(s.InputSchema); err != nil {
			return errs.New(codes.InvalidArgument, "agent type %q: skill %q: InputSchema: %w", typeName, clip(s.Name), err)
		}
		if err := checkSchemaObject(s.OutputSchema); err != nil {
			return errs.New(codes.InvalidArgument, "agent type %q: skill %q: OutputSchema: %w", typeName, clip(s.Name), err)
		}
	}
	return nil
}

// Registry maps agent type names to factories and their TypeInfo. It is
// safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	types map[string]*registered
	// typed counts the types with an input schema, so that ValidateInput
	// costs one atomic load while there are none.
	typed atomic.Int32
	// scoped counts the types with a skill that requires scopes, so that
	// RequiredScopes costs one atomic load while there are none.
	scoped atomic.Int32
}

type registered struct {
	factory Factory
	info    TypeInfo
	// inputs are the compiled input schemas of the skills that have one
	// (nil if none has).
	inputs map[string]*jsonschema.Resolved
	// interleave names the skills with Interleave set (nil if none has):
	// read-only once registered, shared by the type's activations (see
	// interleave.go).
	interleave map[string]struct{}
	// scopes are the scopes of the skills that require some (nil if none
	// does): read-only once registered.
	scopes map[string][]string
	// replaceable: registered by Replace, so Replace and Remove may change
	// it.
	replaceable bool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{types: make(map[string]*registered)} }

// Register adds an agent type, with its TypeInfo if given (at most one):
//
//	reg.Register("Planner", newPlanner, grain.TypeInfo{
//		Description: "Plans trips.",
//		Skills:      []grain.Skill{{Name: "plan", Tags: []string{"travel"}, Examples: []string{"plan a trip to Rome"}}},
//		IdleTimeout: time.Minute,
//	})
//
// The name must be a valid type name, not the reserved SessionType, and not
// registered already; errors are InvalidArgument.
func (r *Registry) Register(typeName string, f Factory, info ...TypeInfo) error {
	e, err := newRegistered(typeName, f, info)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.types[typeName]; ok {
		return errs.New(codes.InvalidArgument, "agent type %q is already registered", typeName)
	}
	r.put(typeName, e)
	return nil
}

// Replace registers an agent type as Register does, or, if Replace
// registered it before, replaces its factory and TypeInfo: for types that
// change while the silo runs, such as the cluster's declared types.
// Activations made from then on use the new factory; activations already
// running keep the agent their factory made until they are deactivated
// (the caller deactivates them if the change must reach them). A type that
// Register registered is not replaced: FailedPrecondition. Other errors are
// Register's.
func (r *Registry) Replace(typeName string, f Factory, info ...TypeInfo) error {
	e, err := newRegistered(typeName, f, info)
	if err != nil {
		return err
	}
	e.replaceable = true
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.types[typeName]; ok {
		if !old.replaceable {
			return errs.New(codes.FailedPrecondition, "agent type %q is registered by the silo's program and cannot be replaced", typeName)
		}
		r.drop(typeName)
	}
	r.put(typeName, e)
	return nil
}

// Remove removes an agent type that Replace registered: from then on a
// message to an agent of the type that is not active is NotFound, as for
// any unregistered type; activations already running keep running until
// they are deactivated (the caller deactivates them). NotFound if no such
// type is registered; FailedPrecondition for a type that Register
// registered, which stays.
func (r *Registry) Remove(typeName string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.types[typeName]
	switch {
	case !ok:
		return errs.New(codes.NotFound, "agent type %q is not registered", clip(typeName))
	case !e.replaceable:
		return errs.New(codes.FailedPrecondition, "agent type %q is registered by the silo's program and cannot be removed", typeName)
	}
	r.drop(typeName)
	return nil
}

// Replaceable reports whether typeName is registered by Replace (and so
// may be replaced or removed).
func (r *Registry) Replaceable(typeName string) bool {
	e := r.lookup(typeName)
	return e != nil && e.replaceable
}

// newRegistered checks a type's registration and compiles its skills'
// input schemas.
func newRegistered(typeName string, f Factory, info []TypeInfo) (*registered, error) {
	if !ValidType(typeName) {
		return nil, errs.New(codes.InvalidArgument, "agent type %q: want [A-Za-z][A-Za-z0-9_.-]{0,63}", clip(typeName))
	}
	if typeName == SessionType {
		return nil, errs.New(codes.InvalidArgument, "agent type %q is reserved for client sessions", typeName)
	}
	if f == nil {
		return nil, errs.New(codes.InvalidArgument, "agent type %q: nil factory", typeName)
	}
	var ti TypeInfo
	switch len(info) {
	case 0:
	case 1:
		if err := info[0].validate(typeName); err != nil {
			return nil, err
		}
		ti = info[0].clone()
	default:
		return nil, errs.New(codes.InvalidArgument, "agent type %q: %d TypeInfos, want at most one", typeName, len(info))
	}
	ti.Name = typeName
	var inputs map[string]*jsonschema.Resolved
	var interleave map[string]struct{}
	var scopes map[string][]string
	for _, s := range ti.Skills {
		if len(s.Scopes) > 0 {
			if scopes == nil {
				scopes = make(map[string][]string)
			}
			scopes[s.Name] = s.Scopes
		}
		if s.Interleave {
			if interleave == nil {
				interleave = make(map[string]struct{})
			}
			interleave[s.Name] = struct{}{}
		}
		if len(s.InputSchema) == 0 {
			continue
		}
		rs, err := compileSchema(s.InputSchema)
		if err != nil {
			return nil, errs.New(codes.InvalidArgument, "agent type %q: skill %q: InputSchema: %w", typeName, clip(s.Name), err)
		}
		if inputs == nil {
			inputs = make(map[string]*jsonschema.Resolved)
		}
		inputs[s.Name] = rs
	}
	return &registered{factory: f, info: ti, inputs: inputs, interleave: interleave, scopes: scopes}, nil
}

// put adds e under typeName; r.mu is held.
func (r *Registry) put(typeName string, e *registered) {
	r.types[typeName] = e
	if e.inputs != nil {
		r.typed.Add(1)
	}
	if e.scopes != nil {
		r.scoped.Add(1)
	}
}

// drop removes typeName; r.mu is held.
func (r *Registry) drop(typeName string) {
	if e := r.types[typeName]; e != nil && e.inputs != nil {
		r.typed.Add(-1)
	}
	if e := r.types[typeName]; e != nil && e.scopes != nil {
		r.scoped.Add(-1)
	}
	delete(r.types, typeName)
}

// Lookup returns the factory of typeName.
func (r *Registry) Lookup(typeName string) (Factory, bool) {
	e := r.lookup(typeName)
	if e == nil {
		return nil, false
	}
	return e.factory, true
}

// Info returns the TypeInfo of typeName.
func (r *Registry) Info(typeName string) (TypeInfo, bool) {
	e := r.lookup(typeName)
	if e == nil {
		return TypeInfo{}, false
	}
	return e.info.clone(), true
}

func (r *Registry) lookup(typeName string) *registered {
	r.mu.RLock()
	e := r.types[typeName]
	r.mu.RUnlock()
	return e
}

// Types returns the registered types with their TypeInfo, sorted by name.
func (r *Registry) Types() []TypeInfo {
	r.mu.RLock()
	out := make([]TypeInfo, 0, len(r.types))
	for _, e := range r.types {
		out = append(out, e.info.clone())
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b TypeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Names returns the registered type names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	out := make([]string, 0, len(r.types))
	for name := range r.types {
		out = append(out, name)
	}
	r.mu.RUnlock()
	slices.Sort(out)
	return out
}

// maxNamed bounds the type names an unknown type's error lists.
const maxNamed = 10

// unknown is the NotFound error of an unregistered type: it names the
// registered types, the first maxNamed of them.
func (r *Registry) unknown(typeName string) error {
	names := r.Names()
	switch {
	case len(names) == 0:
		return errs.New(codes.NotFound, "agent type %q is not registered; no agent types are registered on this silo", clip(typeName))
	case len(names) > maxNamed:
		return errs.New(codes.NotFound, "agent type %q is not registered; known types: %s …and %d more (`client types` lists them)",
			clip(typeName), strings.Join(names[:maxNamed], ", "), len(names)-maxNamed)
	}
	return errs.New(codes.NotFound, "agent type %q is not registered; known types: %s", clip(typeName), strings.Join(names, ", "))
}

// checkSchemaObject reports whether raw, if not empty, is a JSON object (a
// JSON Schema is one).
func checkSchemaObject(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return errors.New("not a JSON object")
	}
	if obj == nil {
		return errors.New("not a JSON object (null)")
	}
	return nil
}
