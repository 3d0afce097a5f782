package llm

import (
	"testing"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/mcp"
)

// The names llm writes as strings, not to import package a2a and package
// mcp, are theirs.
func TestOutsideNamesAreTheirs(t *testing.T) {
	for mine, theirs := range map[string]string{
		mcpType:            mcp.RemoteType,
		mcpListTools:       mcp.RemoteListTools,
		mcpCallTool:        mcp.RemoteCallTool,
		a2aType:            a2a.RemoteType,
		a2aInputRequired:   a2a.TypeInputRequired,
		a2aAuthRequired:    a2a.TypeAuthRequired,
		a2aStateRemoteTask: a2a.StateRemoteTaskID,
		a2aFollow:          a2a.StateFollow,
		a2aBackground:      a2a.FollowBackground,
		a2aResult:          a2a.TypeResult,
		a2aStateError:      a2a.StateError,
		a2aMemoryScope:     a2a.MemoryScope,
	} {
		if mine != theirs {
			t.Errorf("llm says %q where its package says %q", mine, theirs)
		}
	}
}
