package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// tasksDir is where the A2A server keeps tasks, under the silo's prefix:
// a2a/tasks/<agent>/<principal>/<task id> (see package a2a).
const tasksDir = "a2a/tasks/"

// maxTasks bounds the tasks a page reads.
const maxTasks = 2000

// taskRow is one A2A task as the page shows it.
type taskRow struct {
	ID, Agent, Principal, State, Context string
	Updated                              time.Time
	Text                                 string // the status message's text, clipped
	Own                                  bool   // the principal's own: it may cancel it
}

type tasksView struct {
	Off    bool
	State  string
	Counts []count
	Rows   []taskRow
	Capped bool
}

// taskJSON is what the page reads of a stored task record.
type taskJSON struct {
	Task struct {
		ID        string `json:"id"`
		ContextID string `json:"contextId"`
		Status    struct {
			State     string     `json:"state"`
			Timestamp *time.Time `json:"timestamp"`
			Message   *struct {
				Parts []struct {
					Text string `json:"text"`
				} `json:"parts"`
			} `json:"message"`
		} `json:"status"`
	} `json:"task"`
}

// noMetadata drops the session's credentials from ctx: they are for the
// gateway, not for etcd.
func noMetadata(ctx context.Context) context.Context {
	return metadata.NewOutgoingContext(ctx, metadata.MD{})
}

// tasksData lists the A2A tasks the principal may read: its own, and, for
// one who holds Read on the agent, those of others with that agent.
func (d *Dashboard) tasksData(ctx context.Context, s *session, r *http.Request) (any, error) {
	v := &tasksView{State: clip(r.URL.Query().Get("state"))}
	if d.cfg.Etcd == nil || d.cfg.A2A == nil {
		v.Off = true
		return v, nil
	}
	resp, err := d.cfg.Etcd.Get(noMetadata(ctx), d.cfg.Prefix+tasksDir, clientv3.WithPrefix(), clientv3.WithLimit(maxTasks))
	if err != nil {
		return v, err
	}
	v.Capped = resp.More
	byState := map[string]int{}
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), d.cfg.Prefix+tasksDir)
		parts := strings.Split(rest, "/")
		if len(parts) != 3 {
			continue
		}
		agent, principal := parts[0], parts[1]
		own := principal == s.caller.Principal
		if !own && !d.mayRead(s, agent) {
			continue
		}
		var t taskJSON
		if json.Unmarshal(kv.Value, &t) != nil {
			continue
		}
		state := strings.TrimPrefix(strings.ToLower(t.Task.Status.State), "task_state_")
		byState[state]++
		if v.State != "" && state != v.State {
			continue
		}
		row := taskRow{ID: t.Task.ID, Agent: agent, Principal: principal, State: state, Context: t.Task.ContextID, Own: own}
		if ts := t.Task.Status.Timestamp; ts != nil {
			row.Updated = *ts
		}
		if m := t.Task.Status.Message; m != nil {
			for _, p := range m.Parts {
				row.Text += p.Text
			}
			row.Text = clipText(row.Text, 200)
		}
		v.Rows = append(v.Rows, row)
	}
	v.Counts = counts(byState)
	slices.SortFunc(v.Rows, func(a, b taskRow) int { return b.Updated.Compare(a.Updated) })
	v.Rows = v.Rows[:min(len(v.Rows), maxRows)]
	return v, nil
}

func (d *Dashboard) mayRead(s *session, agent string) bool {
	if d.cfg.ACL == nil {
		return false
	}
	_, rest, _ := strings.Cut(agent, ":")
	owner, alias, _ := strings.Cut(rest, ":")
	return d.cfg.ACL.Allowed(s.caller, owner, alias, acl.Read)
}

// cancelTask cancels one of the principal's own tasks through the silo's
// A2A handler, as an A2A client would (HTTP+JSON, the session's key or
// client certificate).
func (d *Dashboard) cancelTask(w http.ResponseWriter, r *http.Request, s *session) {
	d.act(w, r, s, func(ctx context.Context) (string, error) {
		if d.cfg.A2A == nil {
			return "", fmt.Errorf("A2A is off on this silo")
		}
		agent, id := clip(r.PostFormValue("agent")), clip(r.PostFormValue("id"))
		parts := strings.Split(agent, ":")
		if len(parts) != 3 || id == "" || strings.ContainsAny(agent+id, "/?#%") {
			return "", fmt.Errorf("cancel: want an agent Type:owner:alias and a task id")
		}
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/a2a/"+strings.Join(parts, "/")+"/tasks/"+id+":cancel", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		switch {
		case s.cert != nil && !d.cfg.A2ACertificates:
			return "", fmt.Errorf("A2A on this silo does not take this dashboard's client certificates: cancel the task through A2A")
		case s.cert != nil:
			req.TLS = s.cert
		case s.key != "":
			req.Header.Set("Authorization", "Bearer "+s.key)
		default:
			req.Header.Set(protocol.PrincipalHeader, s.caller.Principal)
		}
		rec := httptest.NewRecorder()
		d.cfg.A2A.ServeHTTP(rec, req)
		if rec.Code/100 != 2 {
			body, _ := io.ReadAll(io.LimitReader(rec.Body, 512))
			return "", fmt.Errorf("A2A answered %d: %s", rec.Code, strings.TrimSpace(string(body)))
		}
		return "Cancelled task " + id + ".", nil
	})
}

// clipText keeps at most n bytes of s, on a rune boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
