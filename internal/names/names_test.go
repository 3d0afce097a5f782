package names

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		"alice": true, "a": true, "0ops": true, "bob@example.com": true, "a_b.c-d": true,
		strings.Repeat("a", 128): true, strings.Repeat("a", 129): false,
		"": false, "-a": false, ".a": false, "a:b": false, "a b": false, "a/b": false, "é": false,
	} {
		if got := Valid(s); got != want {
			t.Errorf("Valid(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestValidType(t *testing.T) {
	for s, want := range map[string]bool{
		"Echo": true, "A2A": true, "my.type-2_x": true, strings.Repeat("A", 64): true, strings.Repeat("A", 65): false,
		"": false, "2x": false, "_x": false, "a@b": false, "a:b": false,
	} {
		if got := ValidType(s); got != want {
			t.Errorf("ValidType(%q) = %v, want %v", s, got, want)
		}
	}
}
