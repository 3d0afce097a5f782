package a2a

import (
	"context"
	"fmt"
	"slices"
	"strings"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/agentsilo/agentsilo/grain"
)

// Cards: every agent address has an agent card, made from its type's
// TypeInfo (the registry's metadata, the same that ListTypes serves): the
// type's description and skills, the three interfaces of its endpoint
// (JSON-RPC and HTTP+JSON of spec 1.0 at the endpoint, JSON-RPC 0.3 at
// endpoint/v0.3), the capabilities (streaming, push notifications) and the
// security schemes of the silo's authentication. 0.3 clients find the
// card at their endpoint's well-known path (endpoint/v0.3/...), in the
// SDK's compatible form: the 0.3 fields (url, preferredTransport,
// additionalInterfaces, 0.3 security schemes) beside the 1.0 ones. The
// directory card at the root lists every type's skills instead, each with
// its endpoint pattern.

// ioModes are the media types an endpoint takes and gives: text, JSON data
// (a data part), and anything else as raw bytes.
var ioModes = []string{"text/plain", "application/json", "application/octet-stream"}

// cardKey carries, to the card producers, what the request asks a card of.
type cardKey struct{}

type cardRequest struct {
	base  string        // the server's base URL
	agent grain.Address // zero for the directory
}

// agentCard is the card of agent, whose endpoint is base+/a2a/...
func (s *Server) agentCard(base string, agent grain.Address, ti grain.TypeInfo) *spec.AgentCard {
	ep := base + endpointPath(agent)
	desc := ti.Description
	if desc == "" {
		desc = fmt.Sprintf("The agentsilo agent %s (type %s).", agent, agent.Type)
	}
	card := &spec.AgentCard{
		Name:        agent.String(),
		Description: desc,
		Version:     s.cfg.Version,
		SupportedInterfaces: []*spec.AgentInterface{
			{URL: ep, ProtocolBinding: spec.TransportProtocolJSONRPC, ProtocolVersion: spec.Version},
			{URL: ep, ProtocolBinding: spec.TransportProtocolHTTPJSON, ProtocolVersion: spec.Version},
			{URL: ep + "/v0.3", ProtocolBinding: spec.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version},
			{URL: grpcTarget(base), ProtocolBinding: spec.TransportProtocolGRPC, ProtocolVersion: spec.Version, Tenant: agent.String()},
		},
		Capabilities:       spec.AgentCapabilities{Streaming: true, PushNotifications: true},
		DefaultInputModes:  ioModes,
		DefaultOutputModes: ioModes,
		Skills:             skillsOf(ti, ""),
		Provider:           &spec.AgentProvider{Org: "agentsilo", URL: base},
	}
	card.Capabilities.Extensions = schemaExtension(skillSchemas(nil, ti, ""))
	s.security(card)
	if s.extendedCard() {
		// The skills a token needs scopes for are shown to authenticated
		// callers only, on the extended card.
		card.Capabilities.ExtendedAgentCard = true
		card.Skills = slices.DeleteFunc(card.Skills, func(sk spec.AgentSkill) bool { return len(sk.SecurityRequirements) > 0 })
	}
	return card
}

// extendedCard reports whether the server serves extended cards: where it
// takes the tokens of an OpenID provider.
func (s *Server) extendedCard() bool {
	_, ok := s.auth.OIDC()
	return ok
}

// extendedCards is the authenticated extended card of an agent
// (GetExtendedAgentCard): its public card with every skill, those a token
// needs scopes for included, each naming them. Only an authenticated
// caller gets it (the guard refuses others); over gRPC the agent is the
// request's tenant, as for every method there.
type extendedCards struct{ s *Server }

func (e extendedCards) ExtendedCard(ctx context.Context, _ *spec.GetExtendedAgentCardRequest) (*spec.AgentCard, error) {
	c := callFrom(ctx)
	if c == nil || c.caller == nil || c.err != nil {
		return nil, spec.ErrUnauthenticated
	}
	if c.base == "" || c.agent.Type == "" {
		return nil, spec.ErrUnsupportedOperation
	}
	ti, ok := e.s.reg.Info(c.agent.Type)
	if !ok {
		return nil, spec.ErrInvalidRequest
	}
	card := e.s.agentCard(c.base, c.agent, ti)
	card.Skills = skillsOf(ti, "")
	for i := range card.Skills {
		if len(card.Skills[i].Tags) == 0 {
			// The gRPC binding's card needs a tag on every skill.
			card.Skills[i].Tags = []string{ti.Name}
		}
	}
	return card, nil
}

// skillsOf returns ti's skills as A2A skills, ids prefixed with prefix;
// a type without skills has one, named after it.
func skillsOf(ti grain.TypeInfo, prefix string) []spec.AgentSkill {
	if len(ti.Skills) == 0 {
		desc := ti.Description
		if desc == "" {
			desc = "Agents of type " + ti.Name + "."
		}
		return []spec.AgentSkill{{ID: prefix + ti.Name, Name: ti.Name, Description: desc, Tags: []string{ti.Name}}}
	}
	out := make([]spec.AgentSkill, 0, len(ti.Skills))
	for _, sk := range ti.Skills {
		tags := slices.Clone(sk.Tags)
		if tags == nil {
			tags = []string{}
		}
		out = append(out, spec.AgentSkill{
			ID:          prefix + sk.Name,
			Name:        sk.Name,
			Description: sk.Description,
			Tags:        tags,
			Examples:    slices.Clone(sk.Examples),
			InputModes:  typedModes(sk.InputSchema),
			OutputModes: typedModes(sk.OutputSchema),
			// The scopes a token needs (cleared by security where the
			// silo takes no tokens).
			SecurityRequirements: skillScopes(sk.Scopes),
		})
	}
	return out
}

// directoryCard is the card at the root: the silo's agent types and their
// skills. Skill ids are Type/skill; each says where its agents are. It
// lists no interface of its own: it is the way to the agents' cards.
func (s *Server) directoryCard(ctx context.Context, base string) *spec.AgentCard {
	card := &spec.AgentCard{
		Name:                "agentsilo",
		Description:         fmt.Sprintf("The agent types of this agentsilo cluster (silo %s). Every agent Type:owner:alias is an A2A agent at %s/a2a/{Type}/{owner}/{alias}, its card at that path + %s; GET %s/a2a lists the types as JSON.", s.cfg.Silo, base, wellKnownCard, base),
		Version:             s.cfg.Version,
		SupportedInterfaces: []*spec.AgentInterface{},
		Capabilities:        spec.AgentCapabilities{Streaming: true, PushNotifications: true},
		DefaultInputModes:   ioModes,
		DefaultOutputModes:  ioModes,
		Skills:              []spec.AgentSkill{},
		Provider:            &spec.AgentProvider{Org: "agentsilo", URL: base},
	}
	var schemas map[string]any
	for _, ti := range s.reg.Types() {
		schemas = skillSchemas(schemas, ti, ti.Name+"/")
		for _, sk := range skillsOf(ti, ti.Name+"/") {
			sk.Tags = append(sk.Tags, ti.Name)
			sk.Description += fmt.Sprintf(" (agents: %s/a2a/%s/{owner}/{alias})", base, ti.Name)
			card.Skills = append(card.Skills, sk)
		}
	}
	card.Skills = append(card.Skills, s.outsideSkills(ctx)...)
	card.Capabilities.Extensions = schemaExtension(schemas)
	s.security(card)
	return card
}

// defaultCard is the card of the default agent (Config.DefaultAgent) for
// the host root, or nil if there is none: the agent's own card, which says
// where the directory is.
func (s *Server) defaultCard(base string) *spec.AgentCard {
	if s.cfg.DefaultAgent == "" {
		return nil
	}
	a, err := grain.ParseAddress(s.cfg.DefaultAgent)
	if err != nil {
		return nil
	}
	ti, ok := s.reg.Info(a.Type)
	if !ok {
		return nil
	}
	card := s.agentCard(base, a, ti)
	card.Description += fmt.Sprintf(" (This host's default agent. Every agent Type:owner:alias of the cluster is an A2A agent at %s/a2a/{Type}/{owner}/{alias}; GET %s/a2a lists the types.)", base, base)
	return card
}

// security declares how callers authenticate: an API key (x-api-key, or
// as a bearer token), a token of the OpenID provider (scheme "oidc", a
// bearer token whose provider the card names by its discovery URL) or a
// client certificate, any one of them.
func (s *Server) security(card *spec.AgentCard) {
	if _, ok := s.auth.OIDC(); !ok {
		for i := range card.Skills {
			card.Skills[i].SecurityRequirements = nil
		}
	}
	if !s.auth.Enabled() {
		return
	}
	card.SecuritySchemes = spec.NamedSecuritySchemes{}
	if s.auth.APIKeys() {
		card.SecuritySchemes["apiKey"] = spec.APIKeySecurityScheme{Name: "x-api-key", Location: spec.APIKeySecuritySchemeLocationHeader, Description: "An agentsilo API key."}
		card.SecuritySchemes["bearer"] = spec.HTTPAuthSecurityScheme{Scheme: "Bearer", Description: "An agentsilo API key as a bearer token."}
		card.SecurityRequirements = append(card.SecurityRequirements,
			spec.SecurityRequirements{"apiKey": {}}, spec.SecurityRequirements{"bearer": {}})
	}
	if issuer, ok := s.auth.OIDC(); ok {
		card.SecuritySchemes["oidc"] = spec.OpenIDConnectSecurityScheme{OpenIDConnectURL: strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration",
			Description: "An access token of this OpenID provider for the cluster's audience, as \"Authorization: Bearer TOKEN\"; its subject (or configured claim) is the principal."}
		card.SecurityRequirements = append(card.SecurityRequirements, spec.SecurityRequirements{"oidc": {}})
		// The same token as a plain bearer, for clients that know no
		// openIdConnect scheme.
		bearer := spec.HTTPAuthSecurityScheme{Scheme: "Bearer", BearerFormat: "JWT", Description: "An access token of " + issuer + "."}
		if s.auth.APIKeys() {
			bearer = spec.HTTPAuthSecurityScheme{Scheme: "Bearer", Description: "An agentsilo API key, or an access token (a JWT) of " + issuer + "."}
		} else {
			card.SecurityRequirements = append(card.SecurityRequirements, spec.SecurityRequirements{"bearer": {}})
		}
		card.SecuritySchemes["bearer"] = bearer
	}
	if s.auth.MutualTLS() {
		card.SecuritySchemes["mtls"] = spec.MutualTLSSecurityScheme{Description: "A client certificate: its subject common name (else its first DNS name) is the principal."}
		card.SecurityRequirements = append(card.SecurityRequirements, spec.SecurityRequirements{"mtls": {}})
	}
}

// cardProducer makes the card the request asks for (a2asrv.AgentCardProducer).
type cardProducer struct{ s *Server }

func (p cardProducer) Card(ctx context.Context) (*spec.AgentCard, error) {
	r, _ := ctx.Value(cardKey{}).(*cardRequest)
	if r == nil {
		return nil, fmt.Errorf("a2a: card: no request")
	}
	if r.agent.IsZero() {
		if c := p.s.defaultCard(r.base); c != nil {
			return c, nil
		}
		return p.s.directoryCard(ctx, r.base), nil
	}
	ti, ok := p.s.reg.Info(r.agent.Type)
	if !ok {
		return nil, fmt.Errorf("a2a: card: type %s is not registered", r.agent.Type)
	}
	return p.s.agentCard(r.base, r.agent, ti), nil
}

// skillScopes are a skill's security requirements: a token of the OpenID
// provider with the skill's scopes, or nothing if it requires none.
func skillScopes(scopes []string) spec.SecurityRequirementsOptions {
	if len(scopes) == 0 {
		return nil
	}
	return spec.SecurityRequirementsOptions{spec.SecurityRequirements{"oidc": slices.Clone(scopes)}}
}
