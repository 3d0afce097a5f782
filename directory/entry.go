package directory

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/names"
)

// What is kept in etcd, under the silo's prefix:
//
//	directory/entries/<name>   a Spec as JSON: what an administrator added
//	directory/status/<name>    a status as JSON: what the last refresh found
//
// The two are separate keys so that adding an entry and refreshing it never
// overwrite each other; a status is written only while the entry it was
// fetched for (by its create revision) is still the one stored.
const (
	entriesDir = "directory/entries/"
	statusDir  = "directory/status/"
)

// Spec is an outside entry as added: an A2A agent or an MCP server by URL.
type Spec struct {
	// Name names the entry, and is the alias it is called by:
	// A2A:{owner}:<name>, MCP:{owner}:<name>. [A-Za-z0-9][A-Za-z0-9_.@-]{0,127};
	// one namespace for both kinds.
	Name string `json:"name"`
	// Kind is grain.KindA2A or grain.KindMCP.
	Kind string `json:"kind"`
	// URL is the A2A agent's base URL (its card at
	// {url}/.well-known/agent-card.json) or card URL (a path ending in
	// .json), or the MCP server's streamable HTTP endpoint.
	URL string `json:"url"`
	// Description, if set, replaces the card's.
	Description string `json:"description,omitempty"`
	// Headers are sent with every request to the entry: its credentials.
	// Never returned by the directory's readers and never logged.
	Headers map[string]string `json:"headers,omitempty"`
	// Skills are pinned: listed beside the card's, and while the card
	// cannot be fetched.
	Skills []grain.Skill `json:"skills,omitempty"`
	// Trust, ApprovedSkills and Principal are an outside A2A agent's
	// trust level (grain.TrustObserve or grain.TrustAct, "" for act), the
	// skills that run without approval at act, and the principal it
	// calls the cluster as (see grain.DirectoryEntry).
	Trust          string   `json:"trust,omitempty"`
	ApprovedSkills []string `json:"approved_skills,omitempty"`
	Principal      string   `json:"principal,omitempty"`
}

// Bounds on what an entry may hold: an administrator's input and what an
// outside agent's card or tool list says are cut to them.
const (
	maxText      = 2048 // a description, an example
	maxShort     = 128  // a name, a tag
	maxURL       = 2048
	maxHeaders   = 32
	maxHeaderLen = 8192
	maxSkills    = 256
	maxTools     = 1024
	maxList      = 32 // tags or examples of one skill
)

// validate checks an added entry; errors are InvalidArgument.
func (s *Spec) validate() error {
	if !names.Valid(s.Name) {
		return errs.New(codes.InvalidArgument, "directory: entry name %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", clip(s.Name, maxShort))
	}
	if s.Kind != grain.KindA2A && s.Kind != grain.KindMCP {
		return errs.New(codes.InvalidArgument, "directory: entry %s: kind %q: want %q or %q", s.Name, clip(s.Kind, maxShort), grain.KindA2A, grain.KindMCP)
	}
	u, err := url.Parse(s.URL)
	if err != nil || len(s.URL) > maxURL || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return errs.New(codes.InvalidArgument, "directory: entry %s: URL %q: want http(s)://host/... without user info, at most %d bytes", s.Name, clip(s.URL, maxShort), maxURL)
	}
	if len(s.Description) > maxText || !utf8.ValidString(s.Description) {
		return errs.New(codes.InvalidArgument, "directory: entry %s: description: at most %d bytes of UTF-8", s.Name, maxText)
	}
	if len(s.Headers) > maxHeaders {
		return errs.New(codes.InvalidArgument, "directory: entry %s: %d headers, at most %d", s.Name, len(s.Headers), maxHeaders)
	}
	for k, v := range s.Headers {
		if !validHeaderName(k) || len(k) > maxShort {
			return errs.New(codes.InvalidArgument, "directory: entry %s: header name %q is not a valid HTTP header name", s.Name, clip(k, maxShort))
		}
		if !validHeaderValue(v) || len(v) > maxHeaderLen {
			// The value is a credential: not in the error.
			return errs.New(codes.InvalidArgument, "directory: entry %s: the value of header %s is not a valid HTTP header value of at most %d bytes", s.Name, k, maxHeaderLen)
		}
	}
	if len(s.Skills) > maxSkills {
		return errs.New(codes.InvalidArgument, "directory: entry %s: %d skills, at most %d", s.Name, len(s.Skills), maxSkills)
	}
	switch {
	case s.Trust != "" && s.Trust != grain.TrustObserve && s.Trust != grain.TrustAct:
		return errs.New(codes.InvalidArgument, "directory: entry %s: trust %q: want %q or %q", s.Name, clip(s.Trust, maxShort), grain.TrustObserve, grain.TrustAct)
	case (s.Trust != "" || len(s.ApprovedSkills) > 0 || s.Principal != "") && s.Kind != grain.KindA2A:
		return errs.New(codes.InvalidArgument, "directory: entry %s: trust, approved skills and a principal are an outside A2A agent's", s.Name)
	case len(s.ApprovedSkills) > 0 && s.Trust == grain.TrustObserve:
		return errs.New(codes.InvalidArgument, "directory: entry %s: approved skills run without approval at trust act; at observe every call waits", s.Name)
	case len(s.ApprovedSkills) > maxSkills:
		return errs.New(codes.InvalidArgument, "directory: entry %s: %d approved skills, at most %d", s.Name, len(s.ApprovedSkills), maxSkills)
	case s.Principal != "" && !names.Valid(s.Principal):
		return errs.New(codes.InvalidArgument, "directory: entry %s: principal %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", s.Name, clip(s.Principal, maxShort))
	}
	for _, a := range s.ApprovedSkills {
		if strings.TrimSpace(a) == "" || len(a) > maxShort || !utf8.ValidString(a) {
			return errs.New(codes.InvalidArgument, "directory: entry %s: an approved skill of 1 to %d bytes of UTF-8", s.Name, maxShort)
		}
	}
	seen := make(map[string]bool, len(s.Skills))
	for i, sk := range s.Skills {
		switch {
		case strings.TrimSpace(sk.Name) == "" || len(sk.Name) > maxShort:
			return errs.New(codes.InvalidArgument, "directory: entry %s: skill %d: a name of 1 to %d bytes", s.Name, i+1, maxShort)
		case seen[sk.Name]:
			return errs.New(codes.InvalidArgument, "directory: entry %s: skill %q appears twice", s.Name, sk.Name)
		case len(sk.Description) > maxText || len(sk.Tags) > maxList || len(sk.Examples) > maxList:
			return errs.New(codes.InvalidArgument, "directory: entry %s: skill %q: a description of at most %d bytes, at most %d tags and %d examples", s.Name, sk.Name, maxText, maxList, maxList)
		case sk.Sensitive:
			return errs.New(codes.InvalidArgument, "directory: entry %s: skill %q: sensitive marks a skill of an agent type (grain.Skill.MarkSensitive); name an outside entry's tool under the model agent's sensitive list", s.Name, sk.Name)
		}
		seen[sk.Name] = true
		for _, t := range sk.Tags {
			if strings.TrimSpace(t) == "" || len(t) > maxShort {
				return errs.New(codes.InvalidArgument, "directory: entry %s: skill %q: a tag of 1 to %d bytes", s.Name, sk.Name, maxShort)
			}
		}
		if len(sk.Scopes) > maxList {
			return errs.New(codes.InvalidArgument, "directory: entry %s: skill %q: at most %d scopes", s.Name, sk.Name, maxList)
		}
		for _, sc := range sk.Scopes {
			if !validScope(sc) {
				return errs.New(codes.InvalidArgument, "directory: entry %s: skill %q: scope %q: want 1 to %d printable ASCII characters, no spaces, quotes or backslashes", s.Name, sk.Name, clip(sc, maxShort), maxShort)
			}
		}
		for _, x := range sk.Examples {
			if len(x) > maxText {
				return errs.New(codes.InvalidArgument, "directory: entry %s: skill %q: an example of at most %d bytes", s.Name, sk.Name, maxText)
			}
		}
		if !utf8.ValidString(sk.Name + sk.Description + strings.Join(sk.Tags, "") + strings.Join(sk.Examples, "")) {
			return errs.New(codes.InvalidArgument, "directory: entry %s: skill %q is not UTF-8", s.Name, clip(sk.Name, maxShort))
		}
	}
	return nil
}

// status is what the last refresh of an entry found.
type status struct {
	// Entry is the create revision of the entry it was fetched for: a
	// status of a removed and added again entry is not the new one's.
	Entry       int64                 `json:"entry"`
	Description string                `json:"description,omitempty"`
	Skills      []grain.Skill         `json:"skills,omitempty"`
	Tools       []grain.DirectoryTool `json:"tools,omitempty"`
	// LastSeen is when the entry last answered; LastAttempt when it was
	// last asked; LastError what went wrong then ("" for nothing).
	LastSeen    time.Time `json:"last_seen,omitzero"`
	LastAttempt time.Time `json:"last_attempt"`
	LastError   string    `json:"last_error,omitempty"`
}

// record is an outside entry as the directory holds it.
type record struct {
	spec      Spec
	createRev int64   // the entry key's create revision
	status    *status // nil before the first refresh
}

// entry is what readers see of r: no headers.
func (r *record) entry() grain.DirectoryEntry {
	e := grain.DirectoryEntry{
		Name:        r.spec.Name,
		Kind:        r.spec.Kind,
		Description: r.spec.Description,
		URL:         r.spec.URL,
		Call:        callOf(r.spec.Kind, r.spec.Name),
		Skills:      r.spec.Skills,

		Trust:          r.spec.Trust,
		ApprovedSkills: r.spec.ApprovedSkills,
		Principal:      r.spec.Principal,
	}
	if e.Kind == grain.KindA2A && e.Trust == "" {
		e.Trust = grain.TrustAct
	}
	if st := r.status; st != nil {
		if e.Description == "" {
			e.Description = st.Description
		}
		for _, sk := range st.Skills {
			if !hasSkill(e.Skills, sk.Name) {
				e.Skills = append(e.Skills, sk)
			}
		}
		e.Tools = st.Tools
		e.LastSeen, e.LastError = st.LastSeen, st.LastError
	}
	return e
}

func hasSkill(skills []grain.Skill, name string) bool {
	for _, sk := range skills {
		if sk.Name == name {
			return true
		}
	}
	return false
}

// callOf is the address pattern an entry is called by.
func callOf(kind, name string) string {
	switch kind {
	case grain.KindA2A:
		return "A2A:{owner}:" + name
	case grain.KindMCP:
		return "MCP:{owner}:" + name
	}
	return name + ":{owner}:{alias}"
}

// typeEntry is the entry of an agent type.
func typeEntry(ti grain.TypeInfo) grain.DirectoryEntry {
	return grain.DirectoryEntry{Name: ti.Name, Kind: grain.KindType, Description: ti.Description, Skills: ti.Skills, Call: callOf(grain.KindType, ti.Name)}
}

func decodeSpec(b []byte) (Spec, error) {
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return Spec{}, err
	}
	return s, s.validate()
}

func decodeStatus(b []byte) (*status, error) {
	var st status
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// clip cuts s to at most n bytes, at a rune boundary, for messages and
// for what outside agents send.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// validHeaderName reports whether k is an HTTP header name (a token).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v may be sent as a header value: no
// control characters but tabs.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// validScope reports whether s is an OAuth scope token (RFC 6749 section
// 3.3) of at most maxShort bytes.
func validScope(s string) bool {
	if s == "" || len(s) > maxShort {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
