package client

import (
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/errs"
	"google.golang.org/grpc/codes"
)

// TestCallOptions: a call takes the options it names, and refuses another
// or an invalid one with InvalidArgument, before anything is sent.
func TestCallOptions(t *testing.T) {
	o, err := callOpts("list", []CallOption{After("x"), Limit(7), nil}, optAfter|optLimit)
	if err != nil || o.after != "x" || o.limit != 7 {
		t.Fatalf("callOpts: %+v, %v", o, err)
	}
	_, err = callOpts("check ACL", []CallOption{InGroups("a"), IfRevision(3), DryRun()}, optGroups)
	if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "IfRevision, DryRun") {
		t.Errorf("options a call does not take: %v", err)
	}
	for _, bad := range []CallOption{Limit(-1), MaxAttempts(-2), At(-3)} {
		if _, err := callOpts("x", []CallOption{bad}, optLimit|optMaxAttempts|optAt); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("a negative option: %v", err)
		}
	}
}
