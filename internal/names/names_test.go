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

func TestBaseAlias(t *testing.T) {
	for alias, want := range map[string]string{
		"main.ctx0123456789abcdef":  "main",
		"a.b.ctx0123456789abcdef":   "a.b",
		".ctx0123456789abcdef":      ".ctx0123456789abcdef", // no base
		"main.ctx0123456789abcdeF":  "main.ctx0123456789abcdeF",
		"main.ctx0123456789abcde":   "main.ctx0123456789abcde",
		"main.ctx0123456789abcdef0": "main.ctx0123456789abcdef0",
		"mainxctx0123456789abcdef":  "mainxctx0123456789abcdef",
		"main":                      "main",
		"":                          "",
		"m.ctx0123456789abcdef.ctxffffffffffffffff": "m.ctx0123456789abcdef",
	} {
		if got := BaseAlias(alias); got != want {
			t.Errorf("BaseAlias(%q) = %q, want %q", alias, got, want)
		}
	}
}
