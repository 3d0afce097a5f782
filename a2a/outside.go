package a2a

import (
	"context"
	"fmt"
	"net/http"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/outbound"
)

// Outside agents: the service directory's A2A agents outside the cluster
// (Deps.Outside) are listed by GET /a2a (under "outside") and in the root
// card's skills, each with its URL and the address that calls it through
// the cluster (A2A:{owner}:<entry>). Their credentials are not the
// directory's to show and are not here.

// OutgoingTransport is the HTTP transport of what the silo sends out to
// A2A agents and other outside services: unless allowPrivate, it refuses
// to connect to loopback, private and link-local addresses (the SSRF
// guard), checked after name resolution.
func OutgoingTransport(allowPrivate bool) http.RoundTripper { return outbound.Transport(allowPrivate) }

// maxOutside bounds the outside agents GET /a2a lists and the outside
// skills of the root card (the first by name): a directory may hold many
// more, which a client finds with the directory's search.
const maxOutside = 1000

// outsideInfo is an outside agent in the GET /a2a listing.
type outsideInfo struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	Skills      []typeSkill `json:"skills"`
	// URL is the agent's own (its card at URL or URL/.well-known/...).
	URL string `json:"url"`
	// Call is the agentsilo address that calls it through the cluster.
	Call      string     `json:"call"`
	LastSeen  *time.Time `json:"lastSeen,omitempty"`
	LastError string     `json:"lastError,omitempty"`
}

// outsideAgents lists the outside agents, those with a skill tagged tag
// if tag is not empty.
func (s *Server) outsideAgents(ctx context.Context, tag string) []outsideInfo {
	if s.outside == nil {
		return nil
	}
	var out []outsideInfo
	for _, e := range s.outside(ctx) {
		if len(out) == maxOutside {
			break
		}
		if tag != "" && !(grain.TypeInfo{Skills: e.Skills}).HasTag(tag) {
			continue
		}
		o := outsideInfo{Name: e.Name, Description: e.Description, Skills: []typeSkill{}, URL: e.URL, Call: e.Call, LastError: e.LastError}
		if !e.LastSeen.IsZero() {
			o.LastSeen = &e.LastSeen
		}
		for _, sk := range e.Skills {
			o.Skills = append(o.Skills, typeSkill{Name: sk.Name, Description: sk.Description, Tags: sk.Tags, Examples: sk.Examples})
		}
		out = append(out, o)
	}
	return out
}

// outsideSkills are the root card's skills of the outside agents: ids
// outside/<entry>/<skill>, each saying where the agent is and how the
// cluster calls it.
func (s *Server) outsideSkills(ctx context.Context) []spec.AgentSkill {
	var out []spec.AgentSkill
	for _, o := range s.outsideAgents(ctx, "") {
		ti := grain.TypeInfo{Name: o.Name, Description: o.Description}
		for _, sk := range o.Skills {
			ti.Skills = append(ti.Skills, grain.Skill{Name: sk.Name, Description: sk.Description, Tags: sk.Tags, Examples: sk.Examples})
		}
		for _, sk := range skillsOf(ti, "outside/"+o.Name+"/") {
			if len(out) == maxOutside {
				return out
			}
			sk.Tags = append(sk.Tags, "outside")
			sk.Description += fmt.Sprintf(" (outside agent %s at %s; through this cluster: %s)", o.Name, o.URL, o.Call)
			out = append(out, sk)
		}
	}
	return out
}
