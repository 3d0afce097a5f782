package llm

import (
	"encoding/json"
	"fmt"
	"testing"
)

// A schema is resolved once and shared; one that does not resolve is not
// kept; the cache holds at most maxCompiled schemas.
func TestCompileKeepsSchemas(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	a, err := compile(schema)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile(schema)
	if err != nil || a != b {
		t.Fatalf("compiled again: %p, %p, %v", a, b, err)
	}
	if err := b.Validate(map[string]any{}); err == nil {
		t.Error("the shared schema takes an object without n")
	}
	bad := json.RawMessage(`{"type": 7}`)
	if _, err := compile(bad); err == nil {
		t.Fatal("a schema whose type is a number resolved")
	}
	if compiled.get(bad) != nil {
		t.Error("a schema that did not resolve is kept")
	}
	for i := range maxCompiled + 10 {
		if _, err := compile(json.RawMessage(fmt.Sprintf(`{"type":"object","description":"s%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	compiled.mu.Lock()
	n := len(compiled.m)
	compiled.mu.Unlock()
	if n > maxCompiled {
		t.Errorf("%d schemas kept, want at most %d", n, maxCompiled)
	}
}
