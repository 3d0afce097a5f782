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
