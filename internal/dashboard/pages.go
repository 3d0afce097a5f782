package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentsilo/agentsilo/acl"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// maxRows bounds the rows a table shows; the counts above it are whole.
const maxRows = 200

// clusterView is the cluster page's data.
type clusterView struct {
	Members []*agentsilov1.Member
	Version int64
	Total   uint32
	Etcd    []etcdStatus
}

func (d *Dashboard) clusterData(ctx context.Context, _ *session, _ *http.Request) (any, error) {
	v := &clusterView{Etcd: d.etcdHealth(ctx)}
	resp, err := d.gw.ListMembers(ctx, &agentsilov1.ListMembersRequest{})
	if err != nil {
		return v, err
	}
	v.Members, v.Version = resp.GetMembers(), resp.GetVersion()
	for _, m := range v.Members {
		v.Total += m.GetActivations()
	}
	return v, nil
}

// count is one row of a breakdown: a type or an owner and its agents.
type count struct {
	Name string
	N    int
}

// agentRow is one activation as the agents page shows it.
type agentRow struct {
	Address, Silo string
	LastActive    time.Time
	Mailbox       uint32
}

// agentsView is the agents page's data.
type agentsView struct {
	Type, Owner, Q string
	Total, Matched int
	ByType         []count
	ByOwner        []count
	Rows           []agentRow
}

func (d *Dashboard) agentsData(ctx context.Context, _ *session, r *http.Request) (any, error) {
	q := r.URL.Query()
	v := &agentsView{Type: clip(q.Get("type")), Owner: clip(q.Get("owner")), Q: clip(q.Get("q"))}
	resp, err := d.gw.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: v.Type, Owner: v.Owner})
	if err != nil {
		return v, err
	}
	summarize(v, resp.GetAgents())
	return v, nil
}

// summarize fills v from the activations: counts by type and owner, and
// the first maxRows that match v.Q, most recently active first.
func summarize(v *agentsView, agents []*agentsilov1.ActivationInfo) {
	v.Total = len(agents)
	byType, byOwner := map[string]int{}, map[string]int{}
	var match []*agentsilov1.ActivationInfo
	for _, a := range agents {
		addr := a.GetAddress()
		typ, rest, _ := strings.Cut(addr, ":")
		owner, _, _ := strings.Cut(rest, ":")
		byType[typ]++
		byOwner[owner]++
		if v.Q == "" || strings.Contains(addr, v.Q) {
			match = append(match, a)
		}
	}
	v.Matched = len(match)
	v.ByType, v.ByOwner = counts(byType), counts(byOwner)
	for _, a := range latest(match, maxRows) {
		v.Rows = append(v.Rows, agentRow{Address: a.GetAddress(), Silo: a.GetSilo(), LastActive: a.GetLastActive().AsTime(), Mailbox: a.GetMailboxDepth()})
	}
}

// latest returns the n most recently active of agents, most recent
// first: one pass keeping the n best in a sorted slice, not a sort of
// them all.
func latest(agents []*agentsilov1.ActivationInfo, n int) []*agentsilov1.ActivationInfo {
	newer := func(a, b *agentsilov1.ActivationInfo) int { // <0: a first
		ta, tb := a.GetLastActive(), b.GetLastActive()
		if c := cmp.Compare(tb.GetSeconds(), ta.GetSeconds()); c != 0 {
			return c
		}
		if c := cmp.Compare(tb.GetNanos(), ta.GetNanos()); c != 0 {
			return c
		}
		return strings.Compare(a.GetAddress(), b.GetAddress())
	}
	best := make([]*agentsilov1.ActivationInfo, 0, n+1)
	for _, a := range agents {
		if len(best) == n && newer(a, best[n-1]) >= 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(best, a, newer)
		best = slices.Insert(best, i, a)
		if len(best) > n {
			best = best[:n]
		}
	}
	return best
}

// counts sorts a breakdown, largest first, keeping the first 50.
func counts(m map[string]int) []count {
	out := make([]count, 0, len(m))
	for k, n := range m {
		out = append(out, count{k, n})
	}
	slices.SortFunc(out, func(a, b count) int {
		if c := cmp.Compare(b.N, a.N); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out[:min(len(out), 50)]
}

// agentView is one agent's page.
type agentView struct {
	Address      string
	Active       *agentRow
	Config       []kv
	ConfigFound  bool
	State        string
	StateFound   bool
	ETag         string
	Reminders    []*agentsilov1.ReminderInfo
	MayConfigure bool
	Model        bool // a model agent: its conversation has a page
	Errors       []string
}

type kv struct{ K, V string }

func (d *Dashboard) agentData(ctx context.Context, s *session, r *http.Request) (any, error) {
	addr := clip(r.URL.Query().Get("addr"))
	v := &agentView{Address: addr}
	if addr == "" {
		return v, nil
	}
	note := func(what string, err error) {
		if err != nil {
			v.Errors = append(v.Errors, what+": "+message(err))
		}
	}
	cfg, err := d.gw.GetConfig(ctx, &agentsilov1.GetConfigRequest{Agent: addr})
	note("configuration", err)
	if err == nil {
		v.Address, v.ConfigFound = cfg.GetAddress(), cfg.GetFound()
		for k, val := range cfg.GetConfig() {
			v.Config = append(v.Config, kv{k, val})
		}
		slices.SortFunc(v.Config, func(a, b kv) int { return strings.Compare(a.K, b.K) })
	}
	st, err := d.gw.GetState(ctx, &agentsilov1.GetStateRequest{Agent: addr})
	note("state", err)
	if err == nil {
		v.StateFound, v.ETag = st.GetFound(), st.GetEtag()
		v.State = clipBytes(st.GetData(), 4096)
	}
	rem, err := d.gw.ListReminders(ctx, &agentsilov1.ListRemindersRequest{Agent: addr})
	note("reminders", err)
	v.Reminders = rem.GetReminders()
	typ, rest, _ := strings.Cut(v.Address, ":")
	owner, _, _ := strings.Cut(rest, ":")
	if typ != "" && owner != "" {
		list, err := d.gw.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: typ, Owner: owner})
		note("activation", err)
		for _, a := range list.GetAgents() {
			if a.GetAddress() == v.Address {
				v.Active = &agentRow{Address: a.GetAddress(), Silo: a.GetSilo(), LastActive: a.GetLastActive().AsTime(), Mailbox: a.GetMailboxDepth()}
			}
		}
	}
	if types, err := d.modelTypes(ctx); err == nil {
		v.Model = slices.ContainsFunc(types, func(t *agentsilov1.AgentType) bool { return t.GetName() == typ })
	}
	v.MayConfigure = d.may(s, v.Address, acl.Configure)
	return v, nil
}

// remindersView is the reminders page: the reminders of the agents asked
// for, or of the first active agents.
type remindersView struct {
	Q    string
	Rows []reminderRow
	Note string
}

type reminderRow struct {
	Agent string
	R     *agentsilov1.ReminderInfo
}

func (d *Dashboard) remindersData(ctx context.Context, _ *session, r *http.Request) (any, error) {
	v := &remindersView{Q: clip(r.URL.Query().Get("agent"))}
	if v.Q == "" {
		return v, nil
	}
	rem, err := d.gw.ListReminders(ctx, &agentsilov1.ListRemindersRequest{Agent: v.Q})
	if err != nil {
		return v, err
	}
	for _, x := range rem.GetReminders() {
		v.Rows = append(v.Rows, reminderRow{v.Q, x})
	}
	if len(v.Rows) == 0 {
		v.Note = "none"
	}
	return v, nil
}

// topicsView is the topics page.
type topicsView struct {
	Owner string
	Subs  []*agentsilov1.Subscription
}

func (d *Dashboard) topicsData(ctx context.Context, _ *session, r *http.Request) (any, error) {
	v := &topicsView{Owner: clip(r.URL.Query().Get("owner"))}
	resp, err := d.topics.ListSubscriptions(ctx, &agentsilov1.ListSubscriptionsRequest{Owner: v.Owner})
	if err != nil {
		return v, err
	}
	v.Subs = resp.GetSubscriptions()
	return v, nil
}

// deadLettersView is one subscription's dead letters.
type deadLettersView struct {
	Sub          string
	Letters      []*agentsilov1.DeadLetter
	More         bool
	MayConfigure bool
}

func (d *Dashboard) deadLettersData(ctx context.Context, s *session, r *http.Request) (any, error) {
	v := &deadLettersView{Sub: clip(r.URL.Query().Get("sub"))}
	if v.Sub == "" {
		return v, nil
	}
	owner, name, ok := strings.Cut(v.Sub, ":")
	if !ok {
		owner, name = s.caller.Principal, v.Sub
	}
	v.MayConfigure = d.cfg.ACL == nil || d.cfg.ACL.Allowed(s.caller, owner, name, acl.Configure)
	resp, err := d.topics.ListDeadLetters(ctx, &agentsilov1.ListDeadLettersRequest{Subscription: v.Sub, Limit: maxRows})
	if err != nil {
		return v, err
	}
	v.Letters, v.More = resp.GetDeadLetters(), resp.GetMore()
	return v, nil
}

// aclView is the ACL page.
type aclView struct {
	Rules    []*agentsilov1.AclRule
	Seed     *agentsilov1.AclRule
	Groups   []*agentsilov1.AclGroup
	Revision int64
	Explain  *explainView
}

type explainView struct {
	Caller, Perm, Agent, Group string
	Answer                     *agentsilov1.CheckResponse
	Error                      string
}

func (d *Dashboard) aclData(ctx context.Context, _ *session, r *http.Request) (any, error) {
	v := &aclView{}
	q := r.URL.Query()
	if q.Has("caller") {
		e := &explainView{Caller: clip(q.Get("caller")), Perm: clip(q.Get("perm")), Agent: clip(q.Get("agent")), Group: clip(q.Get("group"))}
		var groups []string
		if e.Group != "" {
			groups = []string{e.Group}
		}
		ans, err := d.admin.Check(ctx, &agentsilov1.CheckRequest{Caller: e.Caller, Agent: e.Agent, Permission: e.Perm, Groups: groups})
		if err != nil {
			e.Error = message(err)
		}
		e.Answer = ans
		v.Explain = e
	}
	rules, err := d.admin.ListRules(ctx, &agentsilov1.ListRulesRequest{})
	if err != nil {
		return v, err
	}
	v.Rules, v.Seed, v.Revision = rules.GetRules(), rules.GetSeedRule(), rules.GetRevision()
	groups, err := d.admin.ListGroups(ctx, &agentsilov1.ListGroupsRequest{})
	if err != nil {
		return v, err
	}
	v.Groups = groups.GetGroups()
	return v, nil
}

// The actions. Each answers with a short message the page shows; the
// gateway decides whether the principal may.

func (d *Dashboard) act(w http.ResponseWriter, r *http.Request, s *session, f func(ctx context.Context) (string, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	msg, err := f(s.ctx(ctx))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusOK) // htmx swaps 2xx only: the refusal is the answer
		d.pages["cluster"].ExecuteTemplate(w, "flash", flash{Error: true, Text: "Refused: " + message(err)})
		return
	}
	d.pages["cluster"].ExecuteTemplate(w, "flash", flash{Text: msg})
}

type flash struct {
	Error bool
	Text  string
}

func (d *Dashboard) deactivate(w http.ResponseWriter, r *http.Request, s *session) {
	d.act(w, r, s, func(ctx context.Context) (string, error) {
		resp, err := d.gw.Deactivate(ctx, &agentsilov1.DeactivateRequest{Agent: clip(r.PostFormValue("agent"))})
		return "Deactivated " + resp.GetAddress() + ".", err
	})
}

func (d *Dashboard) removeReminder(w http.ResponseWriter, r *http.Request, s *session) {
	d.act(w, r, s, func(ctx context.Context) (string, error) {
		name := clip(r.PostFormValue("name"))
		resp, err := d.gw.UnregisterReminder(ctx, &agentsilov1.UnregisterReminderRequest{Agent: clip(r.PostFormValue("agent")), Name: name})
		return fmt.Sprintf("Removed reminder %s of %s.", name, resp.GetAddress()), err
	})
}

// letters returns the form's subscription, the dead letters' ids (at
// most maxRows) and whether it asks for all.
func letters(r *http.Request) (string, []string, bool) {
	_ = r.ParseForm()
	ids := r.PostForm["id"]
	return clip(r.PostFormValue("sub")), ids[:min(len(ids), maxRows)], r.PostFormValue("all") == "true"
}

func (d *Dashboard) replay(w http.ResponseWriter, r *http.Request, s *session) {
	d.act(w, r, s, func(ctx context.Context) (string, error) {
		sub, ids, all := letters(r)
		resp, err := d.topics.ReplayDeadLetters(ctx, &agentsilov1.ReplayDeadLettersRequest{Subscription: sub, Ids: ids, All: all})
		return fmt.Sprintf("Replayed %d dead letters of %s.", resp.GetCount(), sub), err
	})
}

func (d *Dashboard) drop(w http.ResponseWriter, r *http.Request, s *session) {
	d.act(w, r, s, func(ctx context.Context) (string, error) {
		sub, ids, all := letters(r)
		resp, err := d.topics.DropDeadLetters(ctx, &agentsilov1.DropDeadLettersRequest{Subscription: sub, Ids: ids, All: all})
		return fmt.Sprintf("Dropped %d dead letters of %s.", resp.GetCount(), sub), err
	})
}

// may reports whether the session's principal holds perm on the agent,
// as far as the ACL at hand says (true without one: the gateway decides).
func (d *Dashboard) may(s *session, addr string, perm acl.Permission) bool {
	if d.cfg.ACL == nil {
		return true
	}
	_, rest, _ := strings.Cut(addr, ":")
	owner, alias, _ := strings.Cut(rest, ":")
	return d.cfg.ACL.Allowed(s.caller, owner, alias, perm)
}

// clip bounds what a query or form gives a field.
func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

// clipBytes shows at most n bytes of b as text.
func clipBytes(b []byte, n int) string {
	if len(b) > n {
		return strings.ToValidUTF8(string(b[:n]), "?") + fmt.Sprintf("... (%d bytes)", len(b))
	}
	return strings.ToValidUTF8(string(b), "?")
}

// directoryView is the directory page: its entries, or a search's hits.
type directoryView struct {
	Kind, Q string
	Entries []*agentsilov1.DirectoryEntry
	Scores  []float64 // a search's, beside Entries
	More    bool
}

func (d *Dashboard) directoryData(ctx context.Context, _ *session, r *http.Request) (any, error) {
	q := r.URL.Query()
	v := &directoryView{Kind: clip(q.Get("kind")), Q: clip(q.Get("q"))}
	if v.Q != "" {
		resp, err := d.dir.Search(ctx, &agentsilov1.DirectorySearchRequest{Query: v.Q, Kind: v.Kind, Limit: 50})
		if err != nil {
			return v, err
		}
		for _, h := range resp.GetHits() {
			v.Entries = append(v.Entries, h.GetEntry())
			v.Scores = append(v.Scores, h.GetScore())
		}
		return v, nil
	}
	resp, err := d.dir.List(ctx, &agentsilov1.DirectoryListRequest{Kind: v.Kind, Limit: maxRows})
	if err != nil {
		return v, err
	}
	v.Entries, v.More = resp.GetEntries(), resp.GetNext() != ""
	return v, nil
}
