package memory

import (
	"encoding/json"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
)

// The memory's skills declare the JSON Schemas of their request data
// (client.MemoryRequest, by operation) and of their replies
// (client.MemoryReply), so that every way of calling a memory takes the
// same arguments: the gateway and the A2A server check a request against
// its skill's schema before the memory sees it, and each skill is an MCP
// tool whose arguments are the request data (memory.get takes {"key":
// "plan"}). The schemas are written out, not inferred from the Go types:
// an entry's value is any JSON (json.RawMessage would be inferred as an
// array of bytes), and the properties carry descriptions for the models
// that read the tools.

// skills are the memory's skills, with their schemas.
func skills() ([]grain.Skill, error) {
	var b schemas
	entryIn := entrySchema(false)
	keyArg := &jsonschema.Schema{Type: "string", MinLength: ptr(1), Description: "the entry's key"}
	oneEntry := object(map[string]*jsonschema.Schema{"entry": entrySchema(true)})
	manyEntries := object(map[string]*jsonschema.Schema{
		"entries": {Type: "array", Items: entrySchema(true), Description: "the entries, by key"},
	})
	tags := []string{"memory"}
	sk := []grain.Skill{
		{Name: client.MemoryPut, Description: "Store an entry (replacing the entry of the same key): {\"entry\": {\"key\", \"text\" and/or \"value\", \"category\", \"tags\", \"ttl\" (ns)}}; replies with the entry as stored.", Tags: tags,
			InputSchema:  b.json(object(map[string]*jsonschema.Schema{"entry": entryIn}, "entry")),
			OutputSchema: b.json(oneEntry)},
		{Name: client.MemoryGet, Description: "Read an entry: {\"key\"}; NotFound if absent or expired.", Tags: tags,
			InputSchema:  b.json(object(map[string]*jsonschema.Schema{"key": keyArg}, "key")),
			OutputSchema: b.json(oneEntry)},
		{Name: client.MemoryDelete, Description: "Remove an entry: {\"key\"}.", Tags: tags,
			InputSchema:  b.json(object(map[string]*jsonschema.Schema{"key": keyArg}, "key")),
			OutputSchema: b.json(object(nil))},
		{Name: client.MemoryList, Description: "List the live entries, by key: {\"query\": {\"prefix\", \"category\", \"tag\", \"limit\"}}, each optional.", Tags: tags,
			InputSchema:  b.json(object(map[string]*jsonschema.Schema{"query": querySchema()})),
			OutputSchema: b.json(manyEntries)},
		{Name: client.MemorySearch, Description: "Find the live entries whose key, text, category, tags or value contain every word of {\"text\"} (case-insensitive), filtered by an optional \"query\" as for memory.list.", Tags: tags,
			InputSchema: b.json(object(map[string]*jsonschema.Schema{
				"text":  {Type: "string", MinLength: ptr(1), MaxLength: ptr(maxSearch), Description: "the words to find"},
				"query": querySchema(),
			}, "text")),
			OutputSchema: b.json(manyEntries)},
	}
	return sk, b.err
}

// entrySchema is the schema of client.MemoryEntry: as a put gives it, or
// (stored) as a reply carries it, with its times.
func entrySchema(stored bool) *jsonschema.Schema {
	when := func(what string) *jsonschema.Schema {
		return &jsonschema.Schema{Type: "string", Description: what + " (RFC 3339), set by the memory: a put ignores it"}
	}
	ttl := &jsonschema.Schema{Type: "integer", Minimum: ptr(0.0), Description: "how long the entry is kept, in nanoseconds (3600000000000 is an hour); 0 or absent: the memory's default, 60 minutes; at most 7 days"}
	if stored {
		ttl.Description = "how long the entry is kept, in nanoseconds"
	}
	return object(map[string]*jsonschema.Schema{
		"key":      {Type: "string", MinLength: ptr(1), MaxLength: ptr(maxKey), Description: "the entry's key, 1 to 512 bytes of UTF-8; a put replaces the entry of the same key"},
		"text":     {Type: "string", Description: "text to keep"},
		"value":    {Description: "any JSON value to keep"},
		"category": {Type: "string", Description: "one word to list the entry by (decision, todo, ...)"},
		"tags":     {Type: "array", Items: &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(maxTag)}, MaxItems: ptr(maxTags), Description: "words to list the entry by"},
		"ttl":      ttl,
		"created":  when("when the entry was written"),
		"expires":  when("when the entry expires"),
	}, "key")
}

// querySchema is the schema of client.MemoryQuery.
func querySchema() *jsonschema.Schema {
	s := object(map[string]*jsonschema.Schema{
		"prefix":   {Type: "string", Description: "only the entries whose key starts with it"},
		"category": {Type: "string", Description: "only the entries of this category"},
		"tag":      {Type: "string", Description: "only the entries with this tag"},
		"limit":    {Type: "integer", Minimum: ptr(0.0), Maximum: ptr(float64(maxLimit)), Description: "the most entries to return (0 or absent: 100)"},
	})
	s.Description = "which entries, each filter optional"
	return s
}

// object is an object schema of props, required naming those it must
// have, and no others.
func object(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
	if props == nil {
		props = map[string]*jsonschema.Schema{}
	}
	var order []string
	for _, name := range propertyOrder {
		if props[name] != nil {
			order = append(order, name)
		}
	}
	return &jsonschema.Schema{Type: "object", Properties: props, PropertyOrder: order, Required: required,
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}} // false
}

// propertyOrder is the order in which the schemas list their properties.
var propertyOrder = []string{"entry", "key", "text", "value", "category", "tags", "ttl", "created", "expires", "query", "prefix", "tag", "limit", "entries"}

// schemas turns schemas into JSON, keeping the first error.
type schemas struct{ err error }

func (b *schemas) json(s *jsonschema.Schema) json.RawMessage {
	out, err := json.Marshal(s)
	if err != nil && b.err == nil {
		b.err = err
	}
	return out
}

func ptr[T any](v T) *T { return &v }
