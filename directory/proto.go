package directory

import (
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// EntryProto is e's wire form.
func EntryProto(e grain.DirectoryEntry) *agentsilov1.DirectoryEntry {
	out := &agentsilov1.DirectoryEntry{Name: e.Name, Kind: e.Kind, Description: e.Description, Url: e.URL, Call: e.Call, LastError: e.LastError,
		Trust: e.Trust, ApprovedSkills: slices.Clone(e.ApprovedSkills), Principal: e.Principal}
	if !e.LastSeen.IsZero() {
		out.LastSeen = timestamppb.New(e.LastSeen)
	}
	for _, sk := range e.Skills {
		out.Skills = append(out.Skills, &agentsilov1.Skill{Name: sk.Name, Description: sk.Description, Tags: slices.Clone(sk.Tags), Examples: slices.Clone(sk.Examples), Sensitive: sk.Sensitive})
	}
	for _, t := range e.Tools {
		out.Tools = append(out.Tools, &agentsilov1.DirectoryTool{Name: t.Name, Description: t.Description})
	}
	return out
}

// SpecFromProto is the Spec an Add request asks for (not yet checked: Add
// checks it).
func SpecFromProto(r *agentsilov1.DirectoryAddRequest) Spec {
	s := Spec{Name: r.GetName(), Kind: r.GetKind(), URL: r.GetUrl(), Description: r.GetDescription(), Headers: r.GetHeaders(),
		Trust: r.GetTrust(), ApprovedSkills: r.GetApprovedSkills(), Principal: r.GetPrincipal()}
	for _, sk := range r.GetSkills() {
		s.Skills = append(s.Skills, grain.Skill{Name: sk.GetName(), Description: sk.GetDescription(), Tags: sk.GetTags(), Examples: sk.GetExamples(), Sensitive: sk.GetSensitive()})
	}
	return s
}
