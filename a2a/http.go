package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// The paths the server answers:
//
//	GET  /.well-known/agent-card.json                  the directory card
//	GET  /a2a                                          the agent types, as JSON
//	     /a2a/{Type}/{owner}/{alias}                   the agent's endpoint: JSON-RPC 1.0 (POST)
//	GET  /a2a/{Type}/{owner}/{alias}/.well-known/agent-card.json   its card (spec 1.0)
//	     /a2a/{Type}/{owner}/{alias}/v0.3              JSON-RPC 0.3 (POST)
//	GET  /a2a/{Type}/{owner}/{alias}/v0.3/.well-known/agent-card.json   its card for 0.3 clients
//	     /a2a/{Type}/{owner}/{alias}/...               HTTP+JSON 1.0 (/message:send, /tasks/{id}, ...)

const (
	wellKnownCard = "/.well-known/agent-card.json"
	endpointRoot  = "/a2a"
	v03Path       = "/v0.3"
)

// endpointPath is the path of an agent's endpoint. Types, owners and
// aliases are made of characters a path segment takes as they are.
func endpointPath(a grain.Address) string {
	return endpointRoot + "/" + a.Type + "/" + a.Owner + "/" + a.Alias
}

var errNotEndpoint = errors.New("not an agent endpoint: want /a2a/{Type}/{owner}/{alias}")

// parseEndpoint splits a request path under /a2a/ into the agent it
// addresses and the rest ("" or "/..."). It refuses anything but a valid
// canonical address: no empty, dot or escaped segments.
func parseEndpoint(path string) (grain.Address, string, error) {
	p, ok := strings.CutPrefix(path, endpointRoot+"/")
	if !ok {
		return grain.Address{}, "", errNotEndpoint
	}
	parts := strings.SplitN(p, "/", 4)
	if len(parts) < 3 {
		return grain.Address{}, "", errNotEndpoint
	}
	for _, seg := range parts[:3] {
		if strings.ContainsRune(seg, ':') {
			return grain.Address{}, "", errNotEndpoint
		}
	}
	a, err := grain.ParseAddress(parts[0] + ":" + parts[1] + ":" + parts[2])
	if err != nil {
		return grain.Address{}, "", err
	}
	rest := ""
	if len(parts) == 4 {
		rest = "/" + parts[3]
	}
	return a, rest, nil
}

// routes is the server's HTTP handler.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(wellKnownCard, func(w http.ResponseWriter, r *http.Request) {
		s.dirCard.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), cardKey{}, &cardRequest{base: s.baseOf(r)})))
	})
	mux.HandleFunc("GET "+endpointRoot, s.types)
	mux.HandleFunc("GET "+endpointRoot+"/{$}", s.types)
	mux.HandleFunc(endpointRoot+"/", s.endpoint)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isGRPC(r) {
			s.serveGRPC(w, r) // see grpc.go
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// baseOf is the base URL of the server as r reached it.
func (s *Server) baseOf(r *http.Request) string {
	if b := s.cfg.baseURL(); b != "" {
		return b
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// endpoint serves an agent's endpoint, its card and its REST paths.
func (s *Server) endpoint(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawPath != "" {
		// An escaped path would be read one way here and another by the
		// SDK's router: accept only plain paths.
		httpError(w, http.StatusNotFound, "escaped characters in the path")
		return
	}
	agent, rest, err := parseEndpoint(r.URL.Path)
	if err != nil {
		httpError(w, http.StatusNotFound, err.Error())
		return
	}
	if _, ok := s.reg.Info(agent.Type); !ok {
		httpError(w, http.StatusNotFound, "agent type "+agent.Type+" is not registered")
		return
	}
	switch rest {
	case wellKnownCard:
		s.cards.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), cardKey{}, &cardRequest{base: s.baseOf(r), agent: agent})))
		return
	case v03Path + wellKnownCard:
		s.cards03.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), cardKey{}, &cardRequest{base: s.baseOf(r), agent: agent})))
		return
	}
	c := &call{agent: agent, base: s.baseOf(r), traceparent: r.Header.Get("traceparent")}
	if len(c.traceparent) != 55 {
		c.traceparent = "" // not a version-00 traceparent
	}
	if c.caller, c.err = s.auth.AuthenticateHTTP(r); c.err == nil && c.caller.Principal == "" {
		c.err = errors.New("no principal")
	}
	if c.err != nil && unauthenticated(c.err) {
		// A caller that is not authenticated gets HTTP 401 with a
		// challenge on every HTTP binding, as the A2A spec asks; the body
		// is the binding's own error (the REST handler answers 401 itself).
		w.Header().Set("WWW-Authenticate", challenge)
		if rest == "" || rest == v03Path {
			jsonrpcUnauthenticated(w, c.err)
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, int64(s.maxBody))
	readAhead(c, r, rest)
	r = r.WithContext(withCall(r.Context(), c))
	switch rest { // the writers: see corners.go
	case "":
		s.jsonrpc.ServeHTTP(&paramErrors{ResponseWriter: w, c: c}, r)
	case v03Path:
		s.v03.ServeHTTP(&paramErrors{ResponseWriter: &jsonErrors{ResponseWriter: w}, c: c}, r)
	default:
		r2 := r.Clone(r.Context())
		r2.URL.Path = rest
		r2.URL.RawPath = ""
		s.rest.ServeHTTP(w, r2)
	}
}

// typeInfo is a type in the GET /a2a listing.
type typeInfo struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	Skills      []typeSkill `json:"skills"`
	Endpoint    string      `json:"endpoint"`
}

type typeSkill struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	Examples    []string `json:"examples,omitempty"`
	// InputSchema and OutputSchema are a typed skill's JSON Schemas.
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
}

// types serves GET /a2a: the registered types with their skills, from the
// registry's TypeInfo, optionally those with a skill tagged ?skill=TAG.
func (s *Server) types(w http.ResponseWriter, r *http.Request) {
	tag := r.URL.Query().Get("skill")
	base := s.baseOf(r)
	out := struct {
		Types   []typeInfo    `json:"types"`
		Outside []outsideInfo `json:"outside,omitempty"` // outside.go
	}{Types: []typeInfo{}, Outside: s.outsideAgents(r.Context(), tag)}
	for _, ti := range s.reg.Types() {
		if tag != "" && !ti.HasTag(tag) {
			continue
		}
		t := typeInfo{Name: ti.Name, Description: ti.Description, Skills: []typeSkill{}, Endpoint: base + endpointRoot + "/" + url.PathEscape(ti.Name) + "/{owner}/{alias}"}
		for _, sk := range ti.Skills {
			t.Skills = append(t.Skills, typeSkill{Name: sk.Name, Description: sk.Description, Tags: sk.Tags, Examples: sk.Examples,
				InputSchema: sk.InputSchema, OutputSchema: sk.OutputSchema})
		}
		out.Types = append(out.Types, t)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// httpError writes a JSON error outside the protocol's methods.
// challenge is the WWW-Authenticate header of a 401: an API key goes in
// Authorization as a bearer token (or in x-api-key).
const challenge = `Bearer realm="agentsilo"`

// unauthenticated reports whether an authentication error means the
// caller proved no principal (401), not that it claimed one it may not
// act as (PermissionDenied, answered by the binding as a refusal) or sent
// a malformed credential (InvalidArgument).
func unauthenticated(err error) bool {
	switch errs.Code(err) {
	case codes.PermissionDenied, codes.InvalidArgument:
		return false
	}
	return true
}

// jsonrpcUnauthenticated answers a JSON-RPC request whose caller is not
// authenticated: HTTP 401 with the JSON-RPC error Unauthenticated (-31401)
// and no id (the request was not read).
func jsonrpcUnauthenticated(w http.ResponseWriter, err error) {
	msg := err.Error()
	var e *errs.Error
	if errors.As(err, &e) {
		msg = e.Message()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -31401, "message": msg}})
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg}})
}
