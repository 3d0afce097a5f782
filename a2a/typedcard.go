package a2a

import (
	"encoding/json"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/grain"
)

// Typed skills on A2A (see grain.TypedSkill). A card lists a typed
// skill's input and output modes as application/json (a data part), and
// its JSON Schemas in the card extension SkillSchemasExtension:
//
//	"capabilities": {"extensions": [{
//	  "uri": "<SkillSchemasExtension>",
//	  "params": {"metadataKey": "agentsilo.skill",
//	             "skills": {"plan": {"inputSchema": {...}, "outputSchema": {...}}}}}]}
//
// A message calls the skill with its name in the message metadata
// (MetaSkill) and the arguments as its one data part; arguments that do
// not match the input schema reject the task before the agent runs.

// SkillSchemasExtension identifies the card extension that gives typed
// skills' JSON Schemas; the URI is its documentation.
const SkillSchemasExtension = "https://github.com/agentsilo/agentsilo/blob/main/docs/typed-skills.md"

// MetaSkill is the message metadata key that names the skill a message
// calls: the agent gets it as its message_type.
const MetaSkill = "agentsilo.skill"

// typedModes are the input (output) modes of a skill with an input
// (output) schema: JSON data. nil: the card's defaults.
func typedModes(schema json.RawMessage) []string {
	if len(schema) == 0 {
		return nil
	}
	return []string{grain.JSONType}
}

// skillSchemas adds the schemas of ti's typed skills to into (made if
// nil and needed), by skill id (prefix + name).
func skillSchemas(into map[string]any, ti grain.TypeInfo, prefix string) map[string]any {
	for _, sk := range ti.Skills {
		if len(sk.InputSchema) == 0 && len(sk.OutputSchema) == 0 {
			continue
		}
		s := map[string]any{}
		if len(sk.InputSchema) > 0 {
			s["inputSchema"] = sk.InputSchema
		}
		if len(sk.OutputSchema) > 0 {
			s["outputSchema"] = sk.OutputSchema
		}
		if into == nil {
			into = map[string]any{}
		}
		into[prefix+sk.Name] = s
	}
	return into
}

// schemaExtension is the card's extension with the skills' schemas; nil
// without typed skills.
func schemaExtension(schemas map[string]any) []spec.AgentExtension {
	if len(schemas) == 0 {
		return nil
	}
	return []spec.AgentExtension{{
		URI:         SkillSchemasExtension,
		Description: "JSON Schemas of typed skills: call one with its name in the message metadata key " + MetaSkill + " and its arguments as the one data part.",
		Params:      map[string]any{"metadataKey": MetaSkill, "skills": schemas},
	}}
}
