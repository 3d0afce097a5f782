package gateway

import (
	"slices"

	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TypeProto returns ti's wire form, as ListTypes answers it and the silos
// exchange it (the per-type settings stay on the silo).
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
		})
	}
	return out
}
