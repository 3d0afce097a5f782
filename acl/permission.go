package acl

import (
	"encoding/json"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Permission is a set of permission flags: Message, Configure, Read,
// Admin, Approve, Audit.
type Permission uint8

// The permission flags. A rule grants a set of them; a check needs one or
// more.
const (
	// Message allows Ask, Send and Event to an agent.
	Message Permission = 1
	// Configure allows CreateAgent of another owner's agent.
	Configure Permission = 2
	// Read allows listing an agent and reading its reminders.
	Read Permission = 4
	// Admin on the pseudo-agent system:acl allows changing rules and groups.
	Admin Permission = 8
	// Approve allows deciding a model agent's approvals (its tool calls
	// that wait for a person); the agent's owner may always.
	Approve Permission = 16
	// Audit on the pseudo-agent system:audit allows reading the audit log
	// and verifying its chains.
	Audit Permission = 32
	// All is every flag.
	All Permission = Message | Configure | Read | Admin | Approve | Audit
	// None grants nothing: a rule with it denies what it matches.
	None Permission = 0
)

var permNames = [...]struct {
	p    Permission
	name string
}{{Message, "Message"}, {Configure, "Configure"}, {Read, "Read"}, {Admin, "Admin"}, {Approve, "Approve"}, {Audit, "Audit"}}

// String returns the flags as ACL files write them: "Message,Read", "All"
// or "None".
func (p Permission) String() string {
	switch p {
	case None:
		return "None"
	case All:
		return "All"
	}
	var b strings.Builder
	for _, n := range permNames {
		if p&n.p != 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(n.name)
		}
	}
	if rest := p &^ All; rest != 0 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(rest)))
	}
	return b.String()
}

// Has reports whether p holds every flag of need.
func (p Permission) Has(need Permission) bool { return p&need == need }

// ParsePermission parses a comma-separated list of flag names
// (case-insensitive, spaces allowed: "Message,Read", "message, read"), "All",
// "None", or a number from 0 to 63. "|" separates as "," does.
func ParsePermission(s string) (Permission, error) {
	if len(s) > 256 {
		return 0, errs.New(codes.InvalidArgument, "permission %q: too long", s[:64]+"...")
	}
	if t := strings.TrimSpace(s); t != "" && t[0] >= '0' && t[0] <= '9' {
		n, err := strconv.ParseUint(t, 10, 8)
		if err != nil || Permission(n)&^All != 0 {
			return 0, errs.New(codes.InvalidArgument, "permission %q: a number must be 0 to 63", s)
		}
		return Permission(n), nil
	}
	var p Permission
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '|' })
	if len(parts) == 0 {
		return 0, errs.New(codes.InvalidArgument, "permission %q: want a list of Message, Configure, Read, Admin, Approve, Audit, or All or None", s)
	}
	for _, part := range parts {
		part = strings.TrimSpace(part)
		switch {
		case strings.EqualFold(part, "All"):
			p |= All
		case strings.EqualFold(part, "None"):
		default:
			found := false
			for _, n := range permNames {
				if strings.EqualFold(part, n.name) {
					p |= n.p
					found = true
					break
				}
			}
			if !found {
				return 0, errs.New(codes.InvalidArgument, "permission %q: unknown flag %q; want Message, Configure, Read, Admin, Approve, Audit, All or None", s, part)
			}
		}
	}
	return p, nil
}

// MarshalJSON writes p as its String, as ACL files do.
func (p Permission) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// UnmarshalJSON reads a string as ParsePermission does, or a number.
func (p *Permission) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n uint8
		if err := json.Unmarshal(b, &n); err != nil {
			return errs.New(codes.InvalidArgument, "permission %s: want a string such as \"Message,Read\" or a number", b)
		}
		s = strconv.Itoa(int(n))
	}
	v, err := ParsePermission(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}
