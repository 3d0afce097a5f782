package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// An agent's log line written with its handler's context carries the
// trace and span ids of the call it handles, in the real silo program
// with JSON logs.
func TestAgentLogsCarryTraceIDs(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 1})
	cl := c.Client(t, 0)
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// StateProbe logs "state probe save" with its handler's context.
	if _, err := cl.Ask(grain.WithTraceparent(ctx, "00-"+traceID+"-b7ad6b7169203331-01"), "StateProbe:"+testcluster.Principal+":traced", &client.Message{Message: "set v"}); err != nil {
		t.Fatal(err)
	}
	line := c.WaitLog(0, `"msg":"state probe save"`)
	if !strings.Contains(line, `"trace_id":"`+traceID+`"`) || !strings.Contains(line, `"span_id":"`) {
		t.Errorf("the agent's log line has no trace and span ids of its call:\n%s", line)
	}
}
