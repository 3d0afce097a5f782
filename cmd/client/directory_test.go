package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/directory/directorytest"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// The directory commands of docs/directory.md, as written, against a silo
// and two outside peers (an A2A agent on the a2a-go SDK, an MCP server on
// the Go SDK); $WEATHER_URL, $WEATHER_TOKEN and $FILES_URL are expanded as
// a shell would.
func TestDirectoryCLIDoc(t *testing.T) {
	e := etcdtest.Start(t)
	weather := directorytest.StartA2A(t)
	files := directorytest.StartMCP(t)
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "dir"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/dircli/"}
	cfg.Logger = testutil.Logger()
	cfg.A2A.Addr = "127.0.0.1:0"
	cfg.A2A.AllowPrivateNetworks = true
	cfg.DirectoryRefresh = time.Second
	s, err := cluster.NewSilo(cfg, grain.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	env := map[string]string{"WEATHER_URL": weather.URL, "WEATHER_TOKEN": "w-token", "FILES_URL": files.URL}

	for _, line := range strings.Split(strings.TrimSpace(testutil.DocBlock(t, "docs/directory.md", "directory:cli")), "\n") {
		args := words(t, os.Expand(line, func(k string) string { return env[k] }))
		if len(args) < 2 || args[0] != "client" {
			t.Fatalf("docs/directory.md: %q is not a client command", line)
		}
		args = args[1:]
		cmd := strings.Join(args, " ")
		if strings.HasPrefix(cmd, "search ") {
			// As a person would, search once the cards are fetched.
			c, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithPrincipal("dev"))
			if err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "the outside entries refreshed", func() bool {
				lPage, err := c.Directory().List(t.Context(), client.DirectoryQuery{})
				l := lPage.Items
				n := 0
				for _, e := range l {
					if !e.LastSeen.IsZero() {
						n++
					}
				}
				return err == nil && n == 2
			})
			c.Close()
		}
		out, errOut, code := runClient(t, s.GatewayAddr(), args...)
		if code != 0 {
			t.Fatalf("client %s: exit %d: %s", cmd, code, errOut)
		}
		if strings.Contains(out+errOut, "w-token") {
			t.Errorf("client %s printed the credential: %s", cmd, out+errOut)
		}
		var want []string
		switch {
		case strings.Contains(cmd, "directory add weather"):
			want = []string{"a2a weather: A2A:{owner}:weather"}
		case strings.Contains(cmd, "directory add files"):
			want = []string{"mcp files: MCP:{owner}:files"}
		case strings.HasPrefix(cmd, "search "):
			lines := strings.Split(out, "\n")
			want = []string{"SCORE"}
			if len(lines) < 2 || !strings.Contains(lines[1], " a2a ") || !strings.Contains(lines[1], "weather") {
				t.Errorf("search: the outside agent is not first:\n%s", out)
			}
		case strings.HasPrefix(cmd, "directory list"):
			want = []string{"weather", "A2A:{owner}:weather"}
			if strings.Contains(out, "files") {
				t.Errorf("list --kind a2a lists files:\n%s", out)
			}
		case strings.HasPrefix(cmd, "directory get"):
			want = []string{"skill forecast [weather]: Tells the weather forecast for a city.", "url: " + weather.URL}
		case strings.HasPrefix(cmd, "ask "):
			want = []string{"forecast for Lisbon: sunny"}
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("client %s: want %q in\n%s", cmd, w, out)
			}
		}
	}
	if weather.LastAuth() != "Bearer w-token" {
		t.Errorf("the agent got Authorization %q", weather.LastAuth())
	}
	if out, _, code := runClient(t, s.GatewayAddr(), "directory", "get", "files"); code != 3 {
		t.Errorf("files after remove: exit %d, %s", code, out)
	}
}

// words splits a command line as a shell would: at spaces, but not in
// double quotes, which it removes.
func words(t *testing.T, line string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quotes in %q", line)
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}
