package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/llm"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Access to the declared types: they are the pseudo-agent system:types to
// the ACL. Applying and deleting need Admin on it, listing Read; ACL
// administrators (Admin on system:acl, or group admins) may do both, as
// for the directory's outside entries (system:directory).
const (
	typesACLOwner = "system"
	typesACLAgent = "types"
	typesACLType  = "Types" // the type the ACL's errors name
)

// authorizeTypes returns nil if c holds need on system:types (or
// administers the ACL), else PermissionDenied. A nil Authority allows
// everything.
func authorizeTypes(a *acl.Authority, c *acl.Caller, need acl.Permission) error {
	if a == nil || a.Allowed(c, typesACLOwner, typesACLAgent, need) {
		return nil
	}
	if p, _ := a.Policy(); p != nil && p.CheckAdmin(c).Allowed {
		return nil
	}
	return a.Authorize(c, typesACLType, typesACLOwner, typesACLAgent, need)
}

// typeAdmin is the TypeAdmin service (agentsilov1.TypeAdmin) that the
// silo serves on its gateway port: it stores definitions in etcd, which
// every silo's declaredTypes follows.
type typeAdmin struct {
	agentsilov1.UnimplementedTypeAdminServer
	d    *declaredTypes
	acl  *acl.Authority
	info clusterInfo
	// rem holds the reminders of the declared types' schedules.
	rem grain.ReminderService
}

// check authorizes the call's caller (the gateway put it in ctx, or, on a
// gateway without authentication, the principal it declared), and returns
// it.
func (s *typeAdmin) check(ctx context.Context, need acl.Permission) (*acl.Caller, error) {
	c := acl.CallerFrom(ctx)
	if c == nil {
		var err error
		if c, err = auth.CallerFor(nil, auth.DeclaredPrincipal(ctx)); err != nil {
			return nil, err
		}
	}
	return c, authorizeTypes(s.acl, c, need)
}

// ApplyType implements agentsilov1.TypeAdminServer.
func (s *typeAdmin) ApplyType(ctx context.Context, req *agentsilov1.ApplyTypeRequest) (*agentsilov1.ApplyTypeResponse, error) {
	caller, err := s.check(ctx, acl.Admin)
	if err != nil {
		return nil, err
	}
	def, err := llm.ParseDefinition(req.GetDefinition())
	if err != nil {
		return nil, err // InvalidArgument naming the field
	}
	if err := s.notInCode(ctx, def.Type, "declared"); err != nil {
		return nil, err
	}
	// A schedule entry without an owner is the applier's: the stored
	// definition names it, so that replacing or deleting the definition
	// finds the same reminders whoever does it.
	for i := range def.Schedule {
		if def.Schedule[i].Owner == "" {
			def.Schedule[i].Owner = caller.Principal
		}
	}
	now := s.d.clk.Now()
	if _, err := llm.ScheduleReminders(def, "", now); err != nil {
		return nil, err // InvalidArgument naming the entry
	}
	value, err := storedDefinition(def)
	if err != nil {
		return nil, err
	}
	key := s.d.dir + def.Type
	got, err := s.d.client.Get(ctx, key)
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "declared types: read %s", def.Type)
	}
	out := &agentsilov1.ApplyTypeResponse{
		Type:    &agentsilov1.DeclaredType{Name: def.Type, Definition: string(value)},
		Created: len(got.Kvs) == 0,
	}
	if len(got.Kvs) > 0 && bytes.Equal(got.Kvs[0].Value, value) {
		out.Unchanged = true
		if !req.GetDryRun() {
			out.Type.Revision = got.Kvs[0].ModRevision
			// An apply whose reminders failed is finished by applying
			// the same definition again.
			if err := s.schedule(ctx, nil, def, now); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if req.GetDryRun() {
		return out, nil
	}
	put, err := s.d.client.Put(ctx, key, string(value))
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "declared types: store %s", def.Type)
	}
	out.Type.Revision = put.Header.Revision
	s.record(ctx, caller, "apply", def.Type, sha256Hex(value), put.Header.Revision)
	out.Unconfirmed = s.confirm(ctx, put.Header.Revision)
	var old []byte
	if len(got.Kvs) > 0 {
		old = got.Kvs[0].Value
	}
	if err := s.schedule(ctx, old, def, now); err != nil {
		return nil, err
	}
	return out, nil
}

// schedule makes the reminders of def's schedule those of the cluster,
// once its silos serve def: it registers each entry's reminder that its
// agent lacks (one it has keeps its due time), and removes those of the
// entries of old, the definition def replaces (nil: none), that def does
// not have. Its error says the definition is stored and what to do.
func (s *typeAdmin) schedule(ctx context.Context, old []byte, def llm.Definition, now time.Time) error {
	if s.rem == nil {
		return nil
	}
	want, err := llm.ScheduleReminders(def, "", now)
	if err != nil {
		return err
	}
	keep := make(map[string]bool, len(want))
	for _, w := range want {
		keep[w.Agent.String()+"/"+w.Reminder.Name] = true
		have, err := s.rem.List(ctx, w.Agent)
		if err != nil {
			return errs.Wrap(errs.Code(err), err, "declared types: applying %s ran, but the reminders of its schedule were not all registered; apply it again", def.Type)
		}
		if slices.ContainsFunc(have, func(r grain.Reminder) bool { return r.Name == w.Reminder.Name }) {
			continue
		}
		if err := s.rem.Register(ctx, w.Agent, w.Reminder); err != nil {
			return errs.Wrap(errs.Code(err), err, "declared types: applying %s ran, but the reminders of its schedule were not all registered; apply it again", def.Type)
		}
	}
	return s.unschedule(ctx, old, keep)
}

// unschedule removes the reminders of the schedule of the stored
// definition old (nil: none) but those in keep (agent/name).
func (s *typeAdmin) unschedule(ctx context.Context, old []byte, keep map[string]bool) error {
	if s.rem == nil || old == nil {
		return nil
	}
	prev, err := llm.ParseDefinition(old)
	if err != nil {
		return nil // a definition that does not parse was never served: it has no reminders
	}
	gone, err := llm.ScheduleReminders(prev, "", s.d.clk.Now())
	if err != nil {
		return nil // nor does one whose schedule does not give its reminders
	}
	for _, g := range gone {
		if keep[g.Agent.String()+"/"+g.Reminder.Name] {
			continue
		}
		if err := s.rem.Unregister(ctx, g.Agent, g.Reminder.Name); err != nil && errs.Code(err) != codes.NotFound {
			return errs.Wrap(errs.Code(err), err, "declared types: the change of the type ran, but the reminder %s of %s, of a schedule entry the type no longer has, was not removed; remove it with `client reminders remove`", g.Reminder.Name, g.Agent)
		}
	}
	return nil
}

// DeleteType implements agentsilov1.TypeAdminServer.
func (s *typeAdmin) DeleteType(ctx context.Context, req *agentsilov1.DeleteTypeRequest) (*agentsilov1.DeleteTypeResponse, error) {
	caller, err := s.check(ctx, acl.Admin)
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	if !grain.ValidType(name) {
		if len(name) > 80 {
			name = name[:80] + "..."
		}
		return nil, errs.New(codes.InvalidArgument, "delete type: %q is not a type name ([A-Za-z][A-Za-z0-9_.-]{0,63})", name)
	}
	if err := s.notInCode(ctx, name, "deleted"); err != nil {
		return nil, err
	}
	del, err := s.d.client.Delete(ctx, s.d.dir+name, clientv3.WithPrevKV())
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "declared types: delete %s", name)
	}
	if del.Deleted == 0 {
		return nil, errs.New(codes.NotFound, "no agent type %s is declared (`client types` marks the declared ones)", name)
	}
	s.record(ctx, caller, "delete", name, "", del.Header.Revision)
	out := &agentsilov1.DeleteTypeResponse{Unconfirmed: s.confirm(ctx, del.Header.Revision)}
	if len(del.PrevKvs) > 0 {
		if err := s.unschedule(ctx, del.PrevKvs[0].Value, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// record records a definition applied or deleted at etcd revision rev
// (the audit's key: one record per change).
func (s *typeAdmin) record(ctx context.Context, caller *acl.Caller, what, typ, detail string, rev int64) {
	l := s.d.audit
	if !l.Enabled() {
		return
	}
	r := audit.Record{Key: "definition/" + strconv.FormatInt(rev, 10), Kind: audit.KindDefinition, Agent: typesACLOwner + ":" + typesACLAgent, Skill: what, Task: typ, Trigger: "admin", Correlation: strconv.FormatInt(rev, 10)}
	if detail != "" {
		r.Detail = "definition sha256 " + detail
	}
	if caller != nil {
		r.Principal, r.OnBehalfOf = caller.Principal, []string{caller.Principal}
	}
	if err := l.Append(ctx, r); err != nil {
		s.d.logger.Error("audit: a definition change is not recorded", "type", typ, "change", what, "revision", rev, "err", err)
	}
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// ListDeclaredTypes implements agentsilov1.TypeAdminServer.
func (s *typeAdmin) ListDeclaredTypes(ctx context.Context, _ *agentsilov1.ListDeclaredTypesRequest) (*agentsilov1.ListDeclaredTypesResponse, error) {
	if _, err := s.check(ctx, acl.Read); err != nil {
		return nil, err
	}
	resp, err := s.d.client.Get(ctx, s.d.dir, clientv3.WithPrefix())
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "declared types: read the definitions")
	}
	out := &agentsilov1.ListDeclaredTypesResponse{Types: []*agentsilov1.DeclaredType{}}
	for _, kv := range resp.Kvs {
		out.Types = append(out.Types, &agentsilov1.DeclaredType{
			Name:       strings.TrimPrefix(string(kv.Key), s.d.dir),
			Definition: string(kv.Value),
			Revision:   kv.ModRevision,
		})
	}
	return out, nil
}

// notInCode refuses name if a silo's program registers a type of that
// name: this silo's, or another's that answers.
func (s *typeAdmin) notInCode(ctx context.Context, name, what string) error {
	refuse := func(silo string) error {
		return errs.New(codes.FailedPrecondition, "agent type %s is registered in code (by the program of silo %s): it cannot be %s; give the declared type another name", name, silo, what)
	}
	if _, ok := s.d.reg.Info(name); ok && !s.d.reg.Replaceable(name) {
		return refuse(s.info.r.self)
	}
	var inCode []string
	// A silo that does not answer (within peerCheckTimeout) is not
	// checked: it refuses to serve a declared type over one of its own,
	// and logs it.
	ctx, cancel := context.WithTimeout(ctx, peerCheckTimeout)
	defer cancel()
	_ = s.info.askPeers(ctx, msgTypes, "", func(silo string, reply *agentsilov1.AgentMessage) error {
		types, err := decodeTypes(reply)
		for _, t := range types {
			if t.GetName() == name && !t.GetDeclared() {
				inCode = append(inCode, silo)
			}
		}
		return err
	})
	if len(inCode) > 0 {
		slices.Sort(inCode)
		return refuse(strings.Join(inCode, ", "))
	}
	return nil
}

// peerCheckTimeout bounds how long ApplyType and DeleteType wait for the
// other silos' types.
const peerCheckTimeout = 5 * time.Second

// confirmTimeout bounds how long ApplyType and DeleteType wait for the
// silos to serve what they stored.
const confirmTimeout = 10 * time.Second

// confirm waits until every silo of the view has applied the declared
// types up to rev (this one first), and returns those that did not say so
// in time: within confirmTimeout, and a second before ctx's deadline, so
// that the answer still reaches the caller.
func (s *typeAdmin) confirm(ctx context.Context, rev int64) []string {
	timeout := confirmTimeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		timeout = min(timeout, max(left-time.Second, left/2))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var unconfirmed []string
	if _, err := s.d.waitApplied(ctx, rev); err != nil {
		unconfirmed = append(unconfirmed, s.info.r.self)
	}
	st := s.info.r.state.Load()
	confirmed := make(map[string]bool)
	_ = s.info.askSome(ctx, st, reachable, msgDeclared, strconv.FormatInt(rev, 10), nil, func(silo string, reply *agentsilov1.AgentMessage) error {
		confirmed[silo] = true
		return nil
	})
	for _, mi := range st.view.Members {
		if mi.Name != s.info.r.self && !confirmed[mi.Name] {
			unconfirmed = append(unconfirmed, mi.Name)
		}
	}
	slices.Sort(unconfirmed)
	return unconfirmed
}
