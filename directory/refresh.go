package directory

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/outbound"
)

// Refreshing: each outside entry is fetched again every Refresh (its A2A
// card, or its MCP server's tools) by the one silo that owns it (Owns),
// at a time moved by up to a tenth of Refresh by a hash of its name and
// its last attempt, so that entries added at once spread out and a new
// owner after a view change fetches it when the old one would have. The
// result, success or error, is written to the entry's status key, which
// every silo follows; an entry that does not answer stays listed with its
// last error and the time it was last seen.

// maxCard bounds an agent card's size.
const maxCard = 1 << 20

// due is when r should be fetched next.
func (d *Directory) due(r *record) time.Time {
	if r.status == nil {
		return time.Time{} // never fetched: now
	}
	last := r.status.LastAttempt
	h := fnv.New64a()
	h.Write([]byte(r.spec.Name))
	b, _ := last.MarshalBinary()
	h.Write(b)
	span := int64(d.cfg.Refresh / 5)
	jitter := time.Duration(int64(h.Sum64()%uint64(span+1)) - span/2)
	return last.Add(d.cfg.Refresh + jitter)
}

// refreshLoop refreshes the due entries this silo owns, Parallel at a
// time, and sleeps until the next is due (at most a quarter of Refresh,
// so that an entry whose owner changed is not late by much).
func (d *Directory) refreshLoop(ctx context.Context) {
	t := d.clk.NewTimer(0)
	defer t.Stop()
	sem := make(chan struct{}, d.cfg.Parallel)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-d.wake:
		}
		now := d.clk.Now()
		next := d.cfg.Refresh / 4
		var run []job
		d.mu.Lock()
		for name, r := range d.records {
			if d.inflight[name] || (d.cfg.Owns != nil && !d.cfg.Owns(name)) {
				continue
			}
			if at := d.due(r); !at.After(now) {
				d.inflight[name] = true
				run = append(run, job{spec: r.spec, createRev: r.createRev, prev: r.status})
			} else {
				next = min(next, at.Sub(now))
			}
		}
		d.mu.Unlock()
		for _, j := range run {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				d.refresh(ctx, j)
			}()
		}
		t.Reset(next)
	}
}

// job is an entry to refresh, as it was when it came due.
type job struct {
	spec      Spec
	createRev int64
	prev      *status // its last status, nil if none (never changed)
}

// refresh fetches r's entry and stores what it found.
func (d *Directory) refresh(ctx context.Context, r job) {
	defer func() {
		d.mu.Lock()
		delete(d.inflight, r.spec.Name)
		d.mu.Unlock()
		d.poke() // its next time is known once its status is
	}()
	st := &status{Entry: r.createRev, LastAttempt: d.clk.Now()}
	if p := r.prev; p != nil {
		st.LastSeen = p.LastSeen
		st.Description, st.Skills, st.Tools = p.Description, p.Skills, p.Tools
	}
	fctx, cancel := context.WithTimeout(ctx, d.cfg.FetchTimeout)
	var err error
	switch r.spec.Kind {
	case grain.KindA2A:
		err = d.fetchCard(fctx, r.spec, st)
	case grain.KindMCP:
		err = d.fetchTools(fctx, r.spec, st)
	}
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		st.LastError = clip(err.Error(), maxText)
		d.logger.Debug("directory: refresh failed", "entry", r.spec.Name, "host", hostOf(r.spec.URL), "err", st.LastError)
	} else {
		st.LastSeen = d.clk.Now()
	}
	b, merr := json.Marshal(st)
	if merr != nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := d.cfg.Client.Txn(wctx).
		If(clientv3.Compare(clientv3.CreateRevision(d.key(entriesDir, r.spec.Name)), "=", r.createRev)).
		Then(clientv3.OpPut(d.key(statusDir, r.spec.Name), string(b))).
		Commit()
	if err != nil {
		if ctx.Err() == nil {
			d.logger.Warn("directory: storing a refresh", "entry", r.spec.Name, "err", err)
		}
		return
	}
	if resp.Succeeded {
		// Held at once, before the watch brings it: the refresher must
		// not see the entry due again in between.
		d.mu.Lock()
		d.applyPut(d.key(statusDir, r.spec.Name), b, 0)
		d.mu.Unlock()
		d.markDirty()
	}
}

// client is the HTTP client of requests to s: its headers on every
// request, redirects only to the same host (its credentials go nowhere
// else), bodies bounded.
func (d *Directory) client(s Spec) *http.Client {
	return &http.Client{
		Transport: &outbound.Headers{Base: d.cfg.Transport, Header: httpHeader(s.Headers)},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 || req.URL.Host != via[0].URL.Host {
				return errors.New("redirect to another host refused")
			}
			return nil
		},
	}
}

// fetchCard fetches an A2A agent's card: at s.URL if its path ends in
// .json, else at s.URL/.well-known/agent-card.json (cards of spec 0.3 and
// 1.0).
func (d *Directory) fetchCard(ctx context.Context, s Spec, st *status) error {
	u, err := url.Parse(s.URL)
	if err != nil {
		return err
	}
	path := "/.well-known/agent-card.json"
	if strings.HasSuffix(u.Path, ".json") {
		path, u.Path, u.RawPath = u.Path, "", ""
	} else {
		u.Path = strings.TrimRight(u.Path, "/")
		path = u.Path + path
		u.Path, u.RawPath = "", ""
	}
	res := &agentcard.Resolver{Client: d.client(s), CardParser: agentcard.Parser(a2av0.NewAgentCardParser())}
	res.Client.Transport = &outbound.LimitBody{Base: res.Client.Transport, Max: maxCard}
	card, err := res.Resolve(ctx, u.String(), agentcard.WithPath(path))
	if err != nil {
		return err
	}
	st.Description = clip(card.Description, maxText)
	st.Skills = skillsOf(card.Skills)
	return nil
}

// skillsOf is the directory's form of a card's skills, cut to the bounds.
func skillsOf(in []spec.AgentSkill) []grain.Skill {
	out := make([]grain.Skill, 0, min(len(in), maxSkills))
	for _, sk := range in {
		if len(out) == maxSkills {
			break
		}
		name := sk.Name
		if name == "" {
			name = sk.ID
		}
		g := grain.Skill{Name: clip(name, maxShort), Description: clip(sk.Description, maxText)}
		for _, t := range sk.Tags[:min(len(sk.Tags), maxList)] {
			g.Tags = append(g.Tags, clip(t, maxShort))
		}
		for _, x := range sk.Examples[:min(len(sk.Examples), maxList)] {
			g.Examples = append(g.Examples, clip(x, maxText))
		}
		// The scopes of the skill's first security requirement: those a
		// token sent for a call of it carries.
		if len(sk.SecurityRequirements) > 0 {
			for _, sc := range sk.SecurityRequirements[0] {
				for _, x := range sc {
					if len(g.Scopes) < maxList && validScope(x) && !slices.Contains(g.Scopes, x) {
						g.Scopes = append(g.Scopes, x)
					}
				}
			}
			slices.Sort(g.Scopes)
		}
		out = append(out, g)
	}
	return out
}

// fetchTools lists an MCP server's tools (streamable HTTP).
func (d *Directory) fetchTools(ctx context.Context, s Spec, st *status) error {
	hc := d.client(s)
	hc.Transport = &outbound.LimitBody{Base: hc.Transport, Max: 8 << 20}
	cl := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "agentsilo-directory", Version: "1"}, nil)
	sess, err := cl.Connect(ctx, &mcpsdk.StreamableClientTransport{Endpoint: s.URL, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return err
	}
	defer sess.Close()
	var tools []grain.DirectoryTool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		if len(tools) == maxTools {
			break
		}
		desc := t.Description
		if desc == "" && t.Annotations != nil {
			desc = t.Annotations.Title
		}
		tools = append(tools, grain.DirectoryTool{Name: clip(t.Name, maxShort), Description: clip(desc, maxText)})
	}
	st.Tools = tools
	return nil
}

// httpHeader is an entry's headers as an http.Header.
func httpHeader(m map[string]string) http.Header {
	h := make(http.Header, len(m))
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}
