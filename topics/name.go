package topics

import (
	"github.com/agentsilo/agentsilo/internal/topicstore"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Limits of topic names and patterns: each bounds what a client can make
// the silos store and match.
const (
	// MaxSegment is the longest segment of a topic name (64).
	MaxSegment = topicstore.MaxSegment
	// MaxSegments is the most segments a name or pattern has (32).
	MaxSegments = topicstore.MaxSegments
	// MaxName is the longest name or pattern, dots included (the owner
	// not counted): 255.
	MaxName = topicstore.MaxName
)

// Topic is a topic: a hierarchical dot-separated Name (`orders.created.eu`)
// that belongs to an Owner, as an agent's address does. Its canonical form
// is `owner:name`.
type Topic struct {
	Owner string
	Name  string
}

// String returns the canonical form `owner:name`.
func (t Topic) String() string { return t.Owner + ":" + t.Name }

// ParseTopic parses `owner:name`, or a relative `name` whose owner is
// owner (the sender's). Each segment of the name is
// [A-Za-z0-9_-]{1,64}; the owner is an agent owner
// ([A-Za-z0-9][A-Za-z0-9_.@-]{0,127}). The error is InvalidArgument and
// names the bad part.
func ParseTopic(s, owner string) (Topic, error) {
	t, err := topicstore.ParseTopic(s, owner)
	return Topic(t), err
}

// Pattern selects topics of one owner: its segments are names' segments,
// `*` (exactly one segment) or `#` (zero or more segments). Its canonical
// form is `owner:pattern`, e.g. `acme:orders.*.eu` or `acme:orders.#`.
type Pattern struct {
	Owner string
	Text  string // the dot-separated pattern, without the owner
	p     topicstore.Pattern
}

// String returns the canonical form `owner:pattern`.
func (p Pattern) String() string { return p.Owner + ":" + p.Text }

// ParsePattern parses `owner:pattern`, or a relative `pattern` whose owner
// is owner. The owner is literal: a pattern selects topics of one owner.
func ParsePattern(s, owner string) (Pattern, error) {
	p, err := topicstore.ParsePattern(s, owner)
	if err != nil {
		return Pattern{}, err
	}
	return Pattern{Owner: p.Owner, Text: p.Text, p: p}, nil
}

// Match reports whether t is one of the topics p selects.
func (p Pattern) Match(t Topic) bool {
	q := p.p
	if q.Owner != p.Owner || q.Text != p.Text { // made or changed by hand
		q = topicstore.Pattern{Owner: p.Owner, Text: p.Text}
	}
	return q.Match(topicstore.Topic(t))
}

// MatchName reports whether the dot-separated name matches the
// dot-separated pattern (owners aside). Both are taken as they are,
// without validation.
func MatchName(pattern, name string) bool { return topicstore.MatchName(pattern, name) }

// DeadLetter is a message a subscription gave up on, as
// Service.DeadLetters lists it.
type DeadLetter = agentsilov1.DeadLetter

// SubscriptionRecord is a subscription as the Service keeps it.
type SubscriptionRecord = agentsilov1.SubscriptionRecord

// clip keeps error messages short when a client sends a huge name.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
