package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// The paths the server answers, each an MCP endpoint (streamable HTTP:
// POST, GET, DELETE):
//
//	/mcp                          every agent: tools named <Type>_<skill>, with the argument agent (owner:alias)
//	/mcp/{Type}/{owner}/{alias}   one agent: tools named by its type's skills
const endpointRoot = "/mcp"

var errNotEndpoint = errors.New("not an MCP endpoint: want /mcp or /mcp/{Type}/{owner}/{alias}")

// parseEndpoint returns the agent a path under /mcp names: the zero
// Address for /mcp itself. It refuses anything but a valid canonical
// address: no empty, dot or extra segments.
func parseEndpoint(path string) (grain.Address, error) {
	if path == endpointRoot || path == endpointRoot+"/" {
		return grain.Address{}, nil
	}
	p, ok := strings.CutPrefix(path, endpointRoot+"/")
	if !ok {
		return grain.Address{}, errNotEndpoint
	}
	parts := strings.Split(p, "/")
	if len(parts) != 3 {
		return grain.Address{}, errNotEndpoint
	}
	for _, seg := range parts {
		if strings.ContainsRune(seg, ':') {
			return grain.Address{}, errNotEndpoint
		}
	}
	return grain.ParseAddress(parts[0] + ":" + parts[1] + ":" + parts[2])
}

// routes is the server's HTTP handler.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(endpointRoot, s.endpoint)
	mux.HandleFunc(endpointRoot+"/", s.endpoint)
	mux.HandleFunc(wellKnownResource, s.resourceMetadata)
	mux.HandleFunc(wellKnownResource+"/", s.resourceMetadata)
	return mux
}

// wellKnownResource is where an OAuth protected resource publishes its
// metadata (RFC 9728): at the root, and for each endpoint at this path
// followed by the endpoint's.
const wellKnownResource = "/.well-known/oauth-protected-resource"

// resourceMetadata serves the protected resource metadata of an endpoint
// (RFC 9728), as the MCP specification's authorization asks, where the
// server takes an OpenID provider's tokens: the resource (the endpoint's
// URL), its authorization server (the provider's issuer), bearer tokens in
// the Authorization header, and the scopes the skills require. Without a
// provider it is NotFound: API keys and certificates are not OAuth.
func (s *Server) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	issuer, ok := s.auth.OIDC()
	if !ok {
		httpError(w, http.StatusNotFound, "this server takes no OAuth tokens (the silo has no --oidc-issuer)")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, wellKnownResource)
	if path != "" {
		if _, err := parseEndpoint(path); err != nil {
			httpError(w, http.StatusNotFound, err.Error())
			return
		}
	}
	auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               baseURL(r) + path,
		AuthorizationServers:   []string{issuer},
		BearerMethodsSupported: []string{"header"},
		ScopesSupported:        s.scopesSupported(),
		ResourceName:           "agentsilo silo " + s.cfg.Silo,
	}).ServeHTTP(w, r)
}

// baseURL is the scheme and host a request reached the server at.
func baseURL(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// challenge is the WWW-Authenticate of a 401: with an OpenID provider it
// points to the endpoint's protected resource metadata (RFC 9728 §5.1),
// from which an MCP client finds the provider and signs in.
func (s *Server) challenge(r *http.Request) string {
	if _, ok := s.auth.OIDC(); !ok {
		return `Bearer realm="agentsilo"`
	}
	return `Bearer realm="agentsilo", resource_metadata="` + baseURL(r) + wellKnownResource + r.URL.Path + `"`
}

// reqInfo is what the HTTP layer learns of a request: who calls, and which
// endpoint. It reaches the SDK's handlers as the request's TokenInfo.
type reqInfo struct {
	caller *acl.Caller
	agent  grain.Address // zero on the every-agent endpoint
	// http is the HTTP request's context: it ends when the client goes
	// away, and then the calls the request carries are cancelled (they
	// cannot be resumed: the server keeps no events to replay).
	http context.Context
}

type reqInfoKey struct{}

// infoExtra is the key of the reqInfo in TokenInfo.Extra.
const infoExtra = "agentsilo"

// infoOf returns the reqInfo of a request to the SDK.
func infoOf(extra *mcpsdk.RequestExtra) (*reqInfo, bool) {
	if extra == nil || extra.TokenInfo == nil {
		return nil, false
	}
	ri, ok := extra.TokenInfo.Extra[infoExtra].(*reqInfo)
	return ri, ok && ri != nil && ri.caller != nil
}

// endpoint authenticates the caller of an endpoint and hands the request
// to the SDK.
func (s *Server) endpoint(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawPath != "" {
		httpError(w, http.StatusNotFound, "escaped characters in the path")
		return
	}
	agent, err := parseEndpoint(r.URL.Path)
	if err != nil {
		httpError(w, http.StatusNotFound, err.Error())
		return
	}
	if agent.Type != "" {
		if _, ok := s.reg.Info(agent.Type); !ok {
			httpError(w, http.StatusNotFound, "agent type "+agent.Type+" is not registered")
			return
		}
	}
	caller, err := s.auth.AuthenticateHTTP(r)
	if err == nil && caller.Principal == "" {
		err = errs.New(codes.Unauthenticated, "no principal")
	}
	if err != nil {
		status := http.StatusUnauthorized
		switch errs.Code(err) {
		case codes.PermissionDenied:
			status = http.StatusForbidden
		case codes.InvalidArgument:
			status = http.StatusBadRequest
		case codes.Unavailable:
			status = http.StatusServiceUnavailable // the OpenID provider is away
		}
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", s.challenge(r))
		}
		httpError(w, status, messageOf(err))
		return
	}
	ri := &reqInfo{caller: caller, agent: agent, http: r.Context()}
	// The SDK carries a request's TokenInfo to the handlers, and binds a
	// session to its UserID: a session is its principal's, on its path.
	r2 := r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, ri))
	r2.Header = r.Header.Clone()
	r2.Header.Set("Authorization", "Bearer agentsilo")
	r2.Header.Del("X-Api-Key")
	s.handler.ServeHTTP(w, r2)
}

// authenticated puts the reqInfo the endpoint made in the request's
// TokenInfo, the one way the SDK hands a request's context to handlers.
func (s *Server) authenticated(h http.Handler) http.Handler {
	verify := func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		ri, ok := r.Context().Value(reqInfoKey{}).(*reqInfo)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{
			UserID:     ri.caller.Principal + " " + r.URL.Path,
			Expiration: time.Now().Add(time.Hour),
			Extra:      map[string]any{infoExtra: ri},
		}, nil
	}
	return auth.RequireBearerToken(verify, nil)(h)
}

// sdkServerFor is the SDK server of a new session's endpoint, or nil (the
// SDK answers 400) at the session limit.
func (s *Server) sdkServerFor(r *http.Request) *mcpsdk.Server {
	ri, ok := r.Context().Value(reqInfoKey{}).(*reqInfo)
	if !ok {
		return nil
	}
	// The SDK asks for every request; only one without a session may
	// open a new session.
	if r.Header.Get("Mcp-Session-Id") == "" && s.sessions() >= s.cfg.MaxSessions {
		s.logger.Warn("mcp: session refused: the server has its maximum of sessions open", "max", s.cfg.MaxSessions)
		return nil
	}
	if ri.agent.Type == "" {
		return s.every
	}
	return s.typeServer(ri.agent.Type)
}

// guardListing is the SDK middleware that checks a listing's ACL: listing
// an agent's tools needs Read on it; the every-agent endpoint lists the
// registered types to any authenticated caller (as the gateway's
// ListTypes), which holds Read on its own owner scope.
func (s *Server) guardListing(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
	return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
		if method != "tools/list" {
			return next(ctx, method, req)
		}
		ri, ok := infoOf(req.GetExtra())
		if !ok {
			return nil, protocolError(errs.New(codes.Unauthenticated, "no authenticated caller"))
		}
		if ri.agent.Type != "" && s.acl != nil {
			if err := s.acl.Authorize(ri.caller, ri.agent.Type, ri.agent.Owner, ri.agent.Alias, acl.Read); err != nil {
				return nil, protocolError(err)
			}
		}
		return next(ctx, method, req)
	}
}

// httpError writes a JSON error outside the protocol.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

// asMap returns a JSON Schema given as a map, raw JSON or another
// marshalable value, as a map.
func asMap(schema any) (map[string]any, bool) {
	switch v := schema.(type) {
	case map[string]any:
		return v, true
	case nil:
		return nil, false
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, false
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

// scopesSupported are the scopes the registered types' skills require,
// sorted.
func (s *Server) scopesSupported() []string {
	seen := map[string]bool{}
	var out []string
	for _, ti := range s.reg.Types() {
		for _, sk := range ti.Skills {
			for _, sc := range sk.Scopes {
				if !seen[sc] {
					seen[sc] = true
					out = append(out, sc)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
