package a2a

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"

	"github.com/agentsilo/agentsilo/grain"
)

func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct {
		path, agent, rest string
		ok                bool
	}{
		{"/a2a/Echo/dev/e1", "Echo:dev:e1", "", true},
		{"/a2a/Echo/dev/e1/", "Echo:dev:e1", "/", true},
		{"/a2a/Echo/dev/e1/v0.3", "Echo:dev:e1", "/v0.3", true},
		{"/a2a/Echo/dev/e1/tasks/abc:cancel", "Echo:dev:e1", "/tasks/abc:cancel", true},
		{"/a2a/Echo/a@b.c/x-y_z", "Echo:a@b.c:x-y_z", "", true},
		{"/a2a/Echo/dev", "", "", false},
		{"/a2a/Echo//e1", "", "", false},
		{"/a2a/1Echo/dev/e1", "", "", false},
		{"/a2a/Echo/dev/e:1", "", "", false},
		{"/a2a/Echo/../e1", "", "", false},
		{"/a2b/Echo/dev/e1", "", "", false},
		{"/a2a/Session/dev/x", "Session:dev:x", "", true}, // refused later: not a registered type
	} {
		a, rest, err := parseEndpoint(c.path)
		if (err == nil) != c.ok || c.ok && (a.String() != c.agent || rest != c.rest) {
			t.Errorf("parseEndpoint(%q) = %v, %q, %v", c.path, a, rest, err)
		}
	}
}

// FuzzParseEndpoint: any path gives a valid address whose endpoint path
// is the path's start, or an error; never a panic.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"/a2a/Echo/dev/e1", "/a2a/Echo/dev/e1/v0.3/.well-known/agent-card.json", "/a2a/x", "/a2a/A/b/c/d/e", "/a2a/Echo/dev/%2e%2e", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		a, rest, err := parseEndpoint(path)
		if err != nil {
			return
		}
		if _, perr := grain.ParseAddress(a.String()); perr != nil {
			t.Fatalf("%q gave an invalid address %v", path, a)
		}
		if endpointPath(a)+rest != path {
			t.Fatalf("%q split into %q + %q", path, endpointPath(a), rest)
		}
	})
}

func TestPageToken(t *testing.T) {
	p := pageToken{rev: 42, id: "01a2-b"}
	got, err := parsePageToken(p.String())
	if err != nil || got != p {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, bad := range []string{"", "!!!", "MTI", p.String() + "x", strings.Repeat("A", 600)} {
		if _, err := parsePageToken(bad); err == nil {
			t.Errorf("parsePageToken(%q) succeeded", bad)
		}
	}
}

// FuzzPageToken: a token parses to what prints back as itself, or is
// InvalidParams.
func FuzzPageToken(f *testing.F) {
	f.Add(pageToken{rev: 7, id: "abc"}.String())
	f.Add("MTU6MDFhMjA5MDQtYzk1Ni03NmYzLTliYzYtZmJlNzBhMmI5YmRm")
	f.Add("LTE6eA")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePageToken(s)
		if err != nil {
			var e *spec.Error
			if !errors.As(err, &e) {
				t.Fatalf("%q: %v is not an A2A error", s, err)
			}
			return
		}
		if p.rev <= 0 || !validID(p.id) || p.String() != s {
			t.Fatalf("%q parsed to %+v", s, p)
		}
	})
}

func TestToAgentMessage(t *testing.T) {
	m := spec.NewMessage(spec.MessageRoleUser,
		spec.NewTextPart("line 1"), spec.NewTextPart("line 2"),
		spec.NewDataPart(map[string]any{"k": 1.5}),
		spec.NewFileURLPart("https://example.com/f.pdf", "application/pdf"))
	out, err := toAgentMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	if out.Message != "line 1\nline 2" || string(out.Data) != `{"k":1.5}` || out.DataType != "application/json" || len(out.Files) != 1 {
		t.Fatalf("got %v", out)
	}
	if _, err := toAgentMessage(spec.NewMessage(spec.MessageRoleUser, spec.NewDataPart(1), spec.NewRawPart([]byte("x")))); err == nil {
		t.Fatal("two payload parts accepted")
	}
	// And back: JSON data is a data part, other data raw.
	parts := toParts(&grain.Message{Message: "t", Data: []byte(`[1]`), DataType: "application/vnd.x+json; charset=utf-8"})
	if len(parts) != 2 || parts[1].Data() == nil {
		t.Fatalf("JSON data: %v", parts)
	}
	parts = toParts(&grain.Message{Data: []byte{0xff}, DataType: "image/png"})
	if len(parts) != 1 || string(parts[0].Raw()) != "\xff" || parts[0].MediaType != "image/png" {
		t.Fatalf("raw data: %v", parts)
	}
	if parts = toParts(&grain.Message{}); len(parts) != 1 || parts[0].Text() != "" {
		t.Fatalf("empty: %v", parts)
	}
}

// FuzzToAgentMessage: any message the SDK decodes converts to an agent
// message whose parts convert back, or is refused as invalid params.
func FuzzToAgentMessage(f *testing.F) {
	f.Add(`{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}`)
	f.Add(`{"messageId":"m","role":"ROLE_USER","parts":[{"data":{"a":[1,2]}},{"url":"https://x/y"}]}`)
	f.Add(`{"messageId":"m","role":"ROLE_USER","parts":[{"raw":"AAEC","mediaType":"image/png"}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		var m spec.Message
		if json.Unmarshal([]byte(s), &m) != nil {
			return
		}
		out, err := toAgentMessage(&m)
		if err != nil {
			var e *spec.Error
			if !errors.As(err, &e) {
				t.Fatalf("%q: %v is not an A2A error", s, err)
			}
			return
		}
		if len(toParts(out)) == 0 {
			t.Fatalf("%q: no parts back", s)
		}
	})
}

// FuzzRecordEvent: any stored value gives an event, nothing, or an error.
func FuzzRecordEvent(f *testing.F) {
	task := &spec.Task{ID: "t", ContextID: "c", Status: spec.TaskStatus{State: spec.TaskStateWorking}}
	ev := spec.NewStatusUpdateEvent(task, spec.TaskStateCompleted, nil)
	kind, raw, _ := eventRecord(ev)
	b, _ := json.Marshal(taskRecord{Task: task, User: "u", Agent: "A:b:c", Kind: kind, Event: raw})
	f.Add(b)
	b, _ = json.Marshal(taskRecord{Task: task, User: "u", Agent: "A:b:c", Kind: "message"})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := recordEvent(b, 5)
		if err != nil || m == nil {
			return
		}
		if m.Event == nil || m.TaskVersion != taskstore.TaskVersion(5) {
			t.Fatalf("%q gave %+v", b, m)
		}
	})
}

func TestRecordEvent(t *testing.T) {
	task := &spec.Task{ID: "t", ContextID: "c", Status: spec.TaskStatus{State: spec.TaskStateFailed}}
	// The SDK records the event it failed on with the failed task: the
	// watchers get the task.
	kind, raw, _ := eventRecord(spec.NewArtifactEvent(task, spec.NewTextPart("x")))
	b, _ := json.Marshal(taskRecord{Task: task, Kind: kind, Event: raw})
	m, err := recordEvent(b, 3)
	if err != nil || m.Event != m.Event.(*spec.Task) || m.Event.(*spec.Task).Status.State != spec.TaskStateFailed {
		t.Fatalf("failed task: %+v %v", m, err)
	}
	task.Status.State = spec.TaskStateWorking
	b, _ = json.Marshal(taskRecord{Task: task, Kind: "message"})
	if m, err := recordEvent(b, 4); m != nil || err != nil {
		t.Fatalf("history update: %+v %v", m, err)
	}
}

func TestValidID(t *testing.T) {
	for id, ok := range map[string]bool{"01a2-b_c.d": true, "": false, "a/b": false, "..": false, "a b": false, strings.Repeat("a", 129): false} {
		if validID(id) != ok {
			t.Errorf("validID(%q) = %v", id, !ok)
		}
	}
}

// Without authentication, callers declare their principal: only on
// loopback, unless Insecure.
func TestConfigLoopbackOnly(t *testing.T) {
	c := DefaultConfig()
	c.Addr = "0.0.0.0:9090"
	if err := c.Validate(); err == nil {
		t.Fatal("a non-loopback address without authentication was accepted")
	}
	for _, ok := range []func(*Config){
		func(c *Config) { c.Addr = "127.0.0.1:9090" },
		func(c *Config) { c.Addr = "[::1]:9090" },
		func(c *Config) { c.Insecure = true },
		func(c *Config) { c.Auth.KeyFile = "keys.json" },
	} {
		c := DefaultConfig()
		c.Addr = "0.0.0.0:9090"
		ok(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("refused: %v", err)
		}
	}
	c = DefaultConfig()
	c.PublicURL = "ftp://x"
	if err := c.Validate(); err == nil {
		t.Error("an ftp public URL was accepted")
	}
}
