package client

import (
	"context"
	"time"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Audit reads the cluster's audit log through the Audit service of the
// session's gateway: the records of side-effecting actions, and Verify,
// which checks their hash chains. Reach it with Client.Audit.
//
// Every call needs Audit on the pseudo-agent system:audit; others get
// PermissionDenied. A silo with the audit off answers FailedPrecondition.
type Audit struct{ c *Client }

// Audit returns the client's audit calls.
func (c *Client) Audit() Audit { return Audit{c} }

// AuditFilter selects audit records: each field set must match (Principal
// also matches a record whose on-behalf-of chain holds it); Since and
// Until bound the time (Until excluded); Limit bounds the records
// returned, the most recent (0: the most, 1000).
type AuditFilter struct {
	Agent, Principal, Kind string
	Since, Until           time.Time
	Limit                  int
}

// Records returns the records f selects, oldest first.
func (a Audit) Records(ctx context.Context, f AuditFilter) ([]audit.Record, error) {
	ctx, cancel, svc := a.c.auditService(ctx)
	defer cancel()
	req := &agentsilov1.ListAuditRecordsRequest{Agent: f.Agent, Principal: f.Principal, Kind: f.Kind, Limit: int32(min(max(f.Limit, 0), audit.MaxLimit))}
	if !f.Since.IsZero() {
		req.SinceUnixNano = f.Since.UnixNano()
	}
	if !f.Until.IsZero() {
		req.UntilUnixNano = f.Until.UnixNano()
	}
	r, err := svc.ListRecords(ctx, req)
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	out := make([]audit.Record, len(r.GetRecords()))
	for i, p := range r.GetRecords() {
		out[i] = audit.RecordFromProto(p)
	}
	return out, nil
}

// Verify checks every partition's hash chain in the store and reports the
// first record that does not match, if any.
func (a Audit) Verify(ctx context.Context) (audit.Report, error) {
	ctx, cancel, svc := a.c.auditService(ctx)
	defer cancel()
	r, err := svc.Verify(ctx, &agentsilov1.VerifyAuditRequest{})
	if err != nil {
		return audit.Report{}, errs.FromStatus(err)
	}
	rep := audit.Report{OK: r.GetOk(), Partitions: int(r.GetPartitions()), Records: int(r.GetRecords()), Reason: r.GetReason()}
	if r.GetBad() != nil {
		bad := audit.RecordFromProto(r.GetBad())
		rep.Bad = &bad
	}
	return rep, nil
}

func (c *Client) auditService(ctx context.Context) (context.Context, context.CancelFunc, agentsilov1.AuditClient) {
	ctx, cancel, _ := c.unary(ctx)
	return ctx, cancel, agentsilov1.NewAuditClient(c.conns[c.connIndex()])
}
