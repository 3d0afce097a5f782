package topicstore

import "github.com/agentsilo/agentsilo/internal/topicname"

// The grammar of topic names and patterns is package topicname's; these
// are its names here.
const (
	MaxSegment  = topicname.MaxSegment
	MaxSegments = topicname.MaxSegments
	MaxName     = topicname.MaxName
)

type (
	// Topic is topicname.Topic.
	Topic = topicname.Topic
	// Pattern is topicname.Pattern.
	Pattern = topicname.Pattern
)

// ParseTopic is topicname.ParseTopic.
func ParseTopic(s, owner string) (Topic, error) { return topicname.ParseTopic(s, owner) }

// ParsePattern is topicname.ParsePattern.
func ParsePattern(s, owner string) (Pattern, error) { return topicname.ParsePattern(s, owner) }

// MatchName is topicname.MatchName.
func MatchName(pattern, name string) bool { return topicname.MatchName(pattern, name) }
