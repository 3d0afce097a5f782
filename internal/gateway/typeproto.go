package gateway

import (
	"encoding/json"
	"slices"

	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TypeProto returns ti's wire form, as ListTypes answers it and the silos
// exchange it (the per-type settings stay on the silo; a skill's
// Sensitive travels, so that a model agent on another silo keeps it).
func TypeProto(ti grain.TypeInfo) *agentsilov1.AgentType {
	out := &agentsilov1.AgentType{Name: ti.Name, Description: ti.Description}
	for _, s := range ti.Skills {
		out.Skills = append(out.Skills, &agentsilov1.Skill{
			Name:         s.Name,
			Description:  s.Description,
			Tags:         slices.Clone(s.Tags),
			Examples:     slices.Clone(s.Examples),
			InputSchema:  string(s.InputSchema),
			OutputSchema: string(s.OutputSchema),
			Sensitive:    s.Sensitive,
		})
	}
	return out
}

// TypeInfoOf is the TypeInfo of t, a type's wire form as TypeProto writes
// it: what another silo's type is known as (in the directory, and to the
// tools of a model agent that names it).
func TypeInfoOf(t *agentsilov1.AgentType) grain.TypeInfo {
	ti := grain.TypeInfo{Name: t.GetName(), Description: t.GetDescription()}
	for _, s := range t.GetSkills() {
		sk := grain.Skill{
			Name:        s.GetName(),
			Description: s.GetDescription(),
			Tags:        slices.Clone(s.GetTags()),
			Examples:    slices.Clone(s.GetExamples()),
			Sensitive:   s.GetSensitive(),
		}
		if s.GetInputSchema() != "" {
			sk.InputSchema = json.RawMessage(s.GetInputSchema())
		}
		if s.GetOutputSchema() != "" {
			sk.OutputSchema = json.RawMessage(s.GetOutputSchema())
		}
		ti.Skills = append(ti.Skills, sk)
	}
	return ti
}
