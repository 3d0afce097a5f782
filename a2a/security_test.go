package a2a_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

func keyHash(k string) string {
	h := sha256.Sum256([]byte(k))
	return hex.EncodeToString(h[:])
}

// A2A authenticates as the gateway does (API keys as x-api-key or a
// bearer token), declares it in the cards, checks the ACL per method, and
// shows each caller its own tasks only.
func TestSecurity(t *testing.T) {
	e := etcdtest.Start(t)
	aclFile := filepath.Join(t.TempDir(), "acl.json")
	rules := `{"Rules": [{"OwnerPattern": "alice", "AgentPattern": "shared", "CallerPattern": "bob", "Permission": "Message,Read"}]}`
	if err := os.WriteFile(aclFile, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startSilo(t, e, "s1", "/sec/", func(c *cluster.SiloConfig) {
		c.Gateway.Auth.Keys = []auth.APIKey{{SHA256: keyHash("alice-key"), Principal: "alice"}, {SHA256: keyHash("bob-key"), Principal: "bob"}}
		c.ACLFile = aclFile
	})
	alice := map[string]string{"x-api-key": "alice-key"}
	bob := map[string]string{"Authorization": "Bearer bob-key"}
	asTask := taskOf(t)

	// The card is public and names the schemes.
	resp, err := http.Get("http://" + s.A2AAddr() + "/a2a/Echo/alice/x/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	var card struct {
		SecuritySchemes      map[string]json.RawMessage `json:"securitySchemes"`
		SecurityRequirements []json.RawMessage          `json:"securityRequirements"`
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &card); err != nil || card.SecuritySchemes["apiKey"] == nil || card.SecuritySchemes["bearer"] == nil || len(card.SecurityRequirements) != 2 {
		t.Fatalf("card security: %s (%v)", b, err)
	}

	// Not authenticated: HTTP 401 with a challenge on every HTTP binding,
	// the body in the binding's own error format.
	for _, b := range []struct{ path, body, want string }{
		{"", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}`, `"code":-31401`},
		{"/v0.3", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`, `"code":-31401`},
		{"/message:send", `{}`, `UNAUTHENTICATED`},
	} {
		resp, err := http.Post("http://"+s.A2AAddr()+"/a2a/Echo/alice/x"+b.path, "application/json", strings.NewReader(b.body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" || !strings.Contains(string(got), b.want) {
			t.Errorf("POST %q without a key: %s, WWW-Authenticate %q, %s; want 401 with a challenge and %s", b.path, resp.Status, resp.Header.Get("WWW-Authenticate"), got, b.want)
		}
	}

	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			for name, hdr := range map[string]map[string]string{"no key": nil, "a wrong key": {"x-api-key": "nope"}} {
				c := dial(t, s, "Echo/alice/x", tr, hdr)
				// Over JSON-RPC the SDK's client reports the 401 by its
				// status (it reads no body of a non-200 answer).
				if _, err := c.SendMessage(t.Context(), text("hi")); !isErr(err, spec.ErrUnauthenticated) && (tr == "HTTP+JSON" || err == nil || !strings.Contains(err.Error(), "401 Unauthorized")) {
					t.Errorf("%s: %v, want unauthenticated", name, err)
				}
			}
			// A declared principal must be the proven one.
			c := dial(t, s, "Echo/alice/x", tr, map[string]string{"x-api-key": "alice-key", "x-agentsilo-principal": "bob"})
			if _, err := c.SendMessage(t.Context(), text("hi")); !isErr(err, spec.ErrUnauthorized) {
				t.Errorf("alice acting as bob: %v", err)
			}
			// Own agents: allowed.
			ax := dial(t, s, "Echo/alice/x", tr, alice)
			task := asTask(ax.SendMessage(t.Context(), text("mine")))
			// Another owner's agent without a rule: Message and Read denied.
			bx := dial(t, s, "Echo/alice/x", tr, bob)
			if _, err := bx.SendMessage(t.Context(), text("hi")); !isErr(err, spec.ErrUnauthorized) {
				t.Errorf("bob to alice's agent: %v", err)
			}
			if _, err := bx.GetTask(t.Context(), &spec.GetTaskRequest{ID: task.ID}); !isErr(err, spec.ErrUnauthorized) {
				t.Errorf("bob reading at alice's agent: %v", err)
			}
			// A rule gives bob Message and Read on alice's shared agent: he
			// works with it, and still sees only his own tasks.
			as := dial(t, s, "Echo/alice/shared", tr, alice)
			bs := dial(t, s, "Echo/alice/shared", tr, bob)
			at := asTask(as.SendMessage(t.Context(), text("alice's")))
			bt := asTask(bs.SendMessage(t.Context(), text("bob's")))
			if artifactText(bt) != "bob's" {
				t.Fatalf("bob's task: %q", artifactText(bt))
			}
			if _, err := bs.GetTask(t.Context(), &spec.GetTaskRequest{ID: at.ID}); !isErr(err, spec.ErrTaskNotFound) {
				t.Errorf("bob reading alice's task: %v", err)
			}
			if _, err := bs.CancelTask(t.Context(), &spec.CancelTaskRequest{ID: at.ID}); !isErr(err, spec.ErrTaskNotFound) {
				t.Errorf("bob cancelling alice's task: %v", err)
			}
			if tr != "JSONRPC-0.3" {
				list, err := bs.ListTasks(t.Context(), &spec.ListTasksRequest{})
				if err != nil {
					t.Fatal(err)
				}
				for _, lt := range list.Tasks {
					if lt.ID == at.ID {
						t.Errorf("bob's listing has alice's task")
					}
				}
			}
			// The task is reachable only through its agent's endpoint.
			if _, err := ax.GetTask(t.Context(), &spec.GetTaskRequest{ID: at.ID}); !isErr(err, spec.ErrTaskNotFound) {
				t.Errorf("alice reading a task of another agent: %v", err)
			}
		})
	}
}

// Push notification configs live in etcd; the sender refuses internal
// addresses unless the silo allows them.
func TestPushNotifications(t *testing.T) {
	e := etcdtest.Start(t)
	var mu sync.Mutex
	var got []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		json.NewDecoder(r.Body).Decode(&v)
		mu.Lock()
		got = append(got, v)
		mu.Unlock()
		if r.Header.Get("A2A-Notification-Token") != "tok" {
			t.Errorf("push without the token: %v", r.Header)
		}
	}))
	defer hook.Close()
	posts := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	guarded := startSilo(t, e, "guarded", "/push1/", nil)
	open := startSilo(t, e, "open", "/push2/", func(c *cluster.SiloConfig) { c.A2A.AllowPrivateNetworks = true })
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	asTask := taskOf(t)
	send := func(s *cluster.Silo) *spec.Task {
		c := dial(t, s, "Echo/dev/p", "JSONRPC", dev)
		req := text("notify me")
		req.Config = &spec.SendMessageConfig{PushConfig: &spec.PushConfig{URL: hook.URL + "/hook", Token: "tok"}}
		task := asTask(c.SendMessage(t.Context(), req))
		cfgs, err := c.ListTaskPushConfigs(t.Context(), &spec.ListTaskPushConfigRequest{TaskID: task.ID})
		if err != nil || len(cfgs) != 1 || cfgs[0].URL != hook.URL+"/hook" {
			t.Fatalf("push configs: %v %v", cfgs, err)
		}
		if _, err := c.CreateTaskPushConfig(t.Context(), &spec.PushConfig{TaskID: task.ID, URL: "file:///etc/passwd"}); !isErr(err, spec.ErrInvalidParams) {
			t.Fatalf("a file URL: %v", err)
		}
		return task
	}
	// The final event's push is sent before the send returns.
	send(guarded)
	if n := posts(); n != 0 {
		t.Fatalf("the SSRF guard let %d pushes reach loopback", n)
	}
	send(open)
	if n := posts(); n == 0 {
		t.Fatal("no push reached the webhook")
	}
	mu.Lock()
	last, _ := json.Marshal(got[len(got)-1])
	mu.Unlock()
	var sr spec.StreamResponse
	if err := json.Unmarshal(last, &sr); err != nil {
		t.Fatalf("push body %s: %v", last, err)
	}
	// A blocking send's result and final state are one write: a task.
	if u, ok := sr.Event.(*spec.Task); !ok || u.Status.State != spec.TaskStateCompleted || artifactText(u) != "notify me" {
		t.Fatalf("last push: %s", last)
	}
}
