// Package names holds the grammar of the names agentsilo checks: an agent
// type, and an owner, alias or principal. It imports nothing, so that
// every package that checks a name (grain's addresses, authentication,
// membership, reminders, topics, the directory) shares the one rule
// without importing the runtime for it. grain.ValidType and
// grain.ValidName forward to it.
package names

// ValidType reports whether s is a well-formed agent type name:
// [A-Za-z][A-Za-z0-9_.-]{0,63}.
func ValidType(s string) bool {
	if len(s) == 0 || len(s) > 64 || !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isLetter(c) && !isDigit(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// Valid reports whether s is a well-formed owner, alias or principal:
// [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}.
func Valid(s string) bool {
	if len(s) == 0 || len(s) > 128 || !(isLetter(s[0]) || isDigit(s[0])) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isLetter(c) && !isDigit(c) && c != '_' && c != '.' && c != '@' && c != '-' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// ContextMark starts the suffix of a context alias: an alias that ends in
// ContextMark and 16 lowercase hex digits names the agent that keeps one
// conversation context of the agent whose alias comes before it (see
// grain.ContextAddress).
const ContextMark = ".ctx"

// contextSuffix is the length of a context alias's suffix.
const contextSuffix = len(ContextMark) + 16

// BaseAlias returns the alias of the agent whose context alias is alias,
// or alias itself if it is not a context alias. It does not allocate.
func BaseAlias(alias string) string {
	n := len(alias) - contextSuffix
	if n < 1 || alias[n:n+len(ContextMark)] != ContextMark {
		return alias
	}
	for i := n + len(ContextMark); i < len(alias); i++ {
		if c := alias[i]; !isDigit(c) && (c < 'a' || c > 'f') {
			return alias
		}
	}
	return alias[:n]
}
