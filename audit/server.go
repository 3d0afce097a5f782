package audit

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Server is the Audit gRPC service (agentsilov1.AuditServer) of a Log.
// Every method first calls Authorize, which must let only the callers that
// may read the audit through (the silo's: Audit on system:audit). A nil
// Log answers FailedPrecondition.
type Server struct {
	agentsilov1.UnimplementedAuditServer
	Log       *Log
	Authorize func(ctx context.Context) error
}

func (s *Server) check(ctx context.Context) error {
	if s.Authorize == nil {
		return errs.New(codes.PermissionDenied, "audit: no one may read the audit here")
	}
	if err := s.Authorize(ctx); err != nil {
		return err
	}
	if s.Log == nil {
		return errs.New(codes.FailedPrecondition, "audit: the audit is off on this silo (--audit=false)")
	}
	return nil
}

// ListRecords implements agentsilov1.AuditServer.
func (s *Server) ListRecords(ctx context.Context, req *agentsilov1.ListAuditRecordsRequest) (*agentsilov1.ListAuditRecordsResponse, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	f := Filter{Agent: req.GetAgent(), Principal: req.GetPrincipal(), Kind: req.GetKind(), Limit: int(req.GetLimit())}
	if n := req.GetSinceUnixNano(); n > 0 {
		f.Since = time.Unix(0, n)
	}
	if n := req.GetUntilUnixNano(); n > 0 {
		f.Until = time.Unix(0, n)
	}
	recs, err := s.Log.Query(ctx, f)
	if err != nil {
		return nil, err
	}
	out := &agentsilov1.ListAuditRecordsResponse{Records: make([]*agentsilov1.AuditRecord, len(recs))}
	for i := range recs {
		out.Records[i] = RecordProto(&recs[i])
	}
	return out, nil
}

// Verify implements agentsilov1.AuditServer.
func (s *Server) Verify(ctx context.Context, _ *agentsilov1.VerifyAuditRequest) (*agentsilov1.VerifyAuditResponse, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rep, err := s.Log.Verify(ctx)
	if err != nil {
		return nil, err
	}
	out := &agentsilov1.VerifyAuditResponse{Ok: rep.OK, Partitions: int32(rep.Partitions), Records: int64(rep.Records), Reason: rep.Reason}
	if rep.Bad != nil {
		out.Bad = RecordProto(rep.Bad)
	}
	return out, nil
}

// RecordProto converts r to its wire form.
func RecordProto(r *Record) *agentsilov1.AuditRecord {
	p := &agentsilov1.AuditRecord{
		Partition: r.Partition, Seq: r.Seq, Key: r.Key, Kind: r.Kind, Principal: r.Principal,
		OnBehalfOf: r.OnBehalfOf, Agent: r.Agent, Skill: r.Skill, Task: r.Task, Correlation: r.Correlation,
		Trigger: r.Trigger, Decision: r.Decision, Outcome: r.Outcome, Detail: r.Detail, Tokens: r.Tokens,
		Prev: r.Prev, Hash: r.Hash,
	}
	if !r.Time.IsZero() {
		p.TimeUnixNano = r.Time.UnixNano()
	}
	return p
}

// RecordFromProto converts p from its wire form.
func RecordFromProto(p *agentsilov1.AuditRecord) Record {
	r := Record{
		Partition: p.GetPartition(), Seq: p.GetSeq(), Key: p.GetKey(), Kind: p.GetKind(), Principal: p.GetPrincipal(),
		OnBehalfOf: p.GetOnBehalfOf(), Agent: p.GetAgent(), Skill: p.GetSkill(), Task: p.GetTask(), Correlation: p.GetCorrelation(),
		Trigger: p.GetTrigger(), Decision: p.GetDecision(), Outcome: p.GetOutcome(), Detail: p.GetDetail(), Tokens: p.GetTokens(),
		Prev: p.GetPrev(), Hash: p.GetHash(),
	}
	if n := p.GetTimeUnixNano(); n != 0 {
		r.Time = time.Unix(0, n).UTC()
	}
	return r
}
