package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The audit page: the audit log's records (see package audit), newest
// first, a page at a time, filtered by agent, principal and time, read
// through the gateway's Audit service as the signed-in principal; and
// "Verify chains", the service's Verify. The service refuses principals
// without Audit on system:audit, and the page shows its refusal; the menu
// shows the page only to those the ACL at hand lets read it.

// Page sizes of the audit page.
const (
	auditPageSize = 50
	auditMaxPage  = 200
)

// auditView is the audit page's data.
type auditView struct {
	Agent, Principal, Since string
	Size                    int
	Rows                    []auditRow
	// Older is the URL of the next page (older records), "" if none;
	// Newer the first page's, "" on it.
	Older, Newer string
}

// auditRow is one record as shown.
type auditRow struct {
	audit.Record
}

// Chain is the record's on-behalf-of chain after its principal.
func (r auditRow) Chain() []string {
	if len(r.OnBehalfOf) > 0 && r.OnBehalfOf[0] == r.Principal {
		return r.OnBehalfOf[1:]
	}
	return r.OnBehalfOf
}

// mayAudit reports whether the session's principal may read the audit, as
// far as the ACL at hand says (true without one: the service decides).
func (d *Dashboard) mayAudit(s *session) bool {
	return d.cfg.ACL == nil || d.cfg.ACL.Allowed(s.caller, acl.AdminOwner, acl.AuditAgent, acl.Audit)
}

// parseSince reads the since filter: an RFC 3339 time, a date, or a
// duration back from now (24h).
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errs.New(codes.InvalidArgument, "since %q: want an RFC 3339 time (2026-01-02T15:04:05Z), a date (2026-01-02) or a duration (24h)", s)
}

// auditData reads one page of records, newest first. A page after the
// first is the one before (until) a time, skipping the first skip records
// at exactly that time (shown on the page before).
func (d *Dashboard) auditData(ctx context.Context, s *session, r *http.Request) (any, error) {
	q := r.URL.Query()
	v := &auditView{Agent: clip(q.Get("agent")), Principal: clip(q.Get("principal")), Since: clip(q.Get("since")), Size: auditPageSize}
	if n, err := strconv.Atoi(q.Get("n")); err == nil && n > 0 {
		v.Size = min(n, auditMaxPage)
	}
	since, err := parseSince(v.Since, d.cfg.Now())
	if err != nil {
		return v, err
	}
	var before int64
	skip := 0
	if b := q.Get("before"); b != "" {
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before <= 0 {
			return v, errs.New(codes.InvalidArgument, "before %q: want a time in Unix nanoseconds", b)
		}
		skip, _ = strconv.Atoi(q.Get("skip"))
		skip = min(max(skip, 0), audit.MaxLimit-v.Size-1)
	}
	req := &agentsilov1.ListAuditRecordsRequest{Agent: v.Agent, Principal: v.Principal, Limit: int32(v.Size + skip + 1)}
	if !since.IsZero() {
		req.SinceUnixNano = since.UnixNano()
	}
	if before > 0 {
		req.UntilUnixNano = before + 1 // Until is excluded: the records at before itself are in
	}
	resp, err := agentsilov1.NewAuditClient(d.cfg.Conn).ListRecords(ctx, req)
	if err != nil {
		return v, err
	}
	recs := resp.GetRecords()
	slices.Reverse(recs) // newest first
	if before > 0 {
		// Drop what the page before showed: the first skip at before.
		n := 0
		for n < len(recs) && n < skip && recs[n].GetTimeUnixNano() == before {
			n++
		}
		recs = recs[n:]
	}
	more := len(recs) > v.Size
	if more {
		recs = recs[:v.Size]
	}
	for _, p := range recs {
		v.Rows = append(v.Rows, auditRow{audit.RecordFromProto(p)})
	}
	link := func(before int64, skip int) string {
		u := url.Values{}
		for k, val := range map[string]string{"agent": v.Agent, "principal": v.Principal, "since": v.Since} {
			if val != "" {
				u.Set(k, val)
			}
		}
		if v.Size != auditPageSize {
			u.Set("n", strconv.Itoa(v.Size))
		}
		if before > 0 {
			u.Set("before", strconv.FormatInt(before, 10))
			u.Set("skip", strconv.Itoa(skip))
		}
		return "/ui/audit?" + u.Encode()
	}
	if more && len(recs) > 0 {
		last := recs[len(recs)-1].GetTimeUnixNano()
		same := 0
		for i := len(recs) - 1; i >= 0 && recs[i].GetTimeUnixNano() == last; i-- {
			same++
		}
		if last == before {
			same += skip // the records at before on the pages before too
		}
		v.Older = link(last, same)
	}
	if before > 0 {
		v.Newer = link(0, 0)
	}
	return v, nil
}

// verifyAudit checks the audit's hash chains and says what it found.
func (d *Dashboard) verifyAudit(w http.ResponseWriter, r *http.Request, s *session) {
	d.act(w, r, s, func(ctx context.Context) (string, error) {
		rep, err := agentsilov1.NewAuditClient(d.cfg.Conn).Verify(ctx, &agentsilov1.VerifyAuditRequest{})
		if err != nil {
			return "", err
		}
		if rep.GetOk() {
			return fmt.Sprintf("Verified: %d records in %d partitions; every chain matches.", rep.GetRecords(), rep.GetPartitions()), nil
		}
		bad := rep.GetBad()
		return "", errs.New(codes.DataLoss, "the chains do not match: record %d of partition %s (key %q): %s", bad.GetSeq(), bad.GetPartition(), bad.GetKey(), rep.GetReason())
	})
}
