package testcluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/agentsilo/agentsilo/client"
)

// pollInterval is how often a named wait looks again at the processes it
// waits on.
const pollInterval = 50 * time.Millisecond

// waitFor calls cond every pollInterval until it returns true, the wait's
// bound (Options.WaitTimeout) passes, or the test's context ends; then it
// fails the test with what and cond's last state.
func (c *Cluster) waitFor(what string, cond func(ctx context.Context) (bool, string)) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(c.tb.Context(), c.opts.WaitTimeout)
	defer cancel()
	if err := poll(ctx, cond); err != nil {
		c.tb.Fatalf("testcluster: waiting for %s: %v", what, err)
	}
}

// poll calls cond every pollInterval until it returns true or ctx ends; the
// error then has cond's last state.
func poll(ctx context.Context, cond func(ctx context.Context) (bool, string)) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	last := "none yet"
	for {
		ok, state := cond(ctx)
		if ok {
			return nil
		}
		if ctx.Err() == nil {
			last = state // a state seen with time left, not one the end cut short
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last state: %s", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// WaitReady waits until silo i answers 200 on /readyz (in the membership
// view and serving). It fails the test at once if the process exits.
func (c *Cluster) WaitReady(i int) {
	c.tb.Helper()
	s := c.Silo(i)
	p := s.current()
	if p == nil {
		c.tb.Fatalf("testcluster: WaitReady(%d): %s was never started", i, s.Name)
		return
	}
	c.waitFor(s.Name+" ready", func(ctx context.Context) (bool, string) {
		if !p.running() {
			c.tb.Fatalf("testcluster: %s exited (%v) before it was ready:\n%s", s.Name, p.exitErr, tail(s.LogPath, 40))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.HTTPAddr+"/readyz", nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// WaitExited waits until silo i's process ends, and returns its exit code
// (-1 if a signal ended it).
func (c *Cluster) WaitExited(i int) int {
	c.tb.Helper()
	s := c.Silo(i)
	p := s.current()
	if p == nil {
		c.tb.Fatalf("testcluster: WaitExited(%d): %s was never started", i, s.Name)
		return -1
	}
	ctx, cancel := context.WithTimeout(c.tb.Context(), c.opts.WaitTimeout)
	defer cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		c.tb.Fatalf("testcluster: waiting for %s (pid %d) to exit: %v", s.Name, p.pid, ctx.Err())
	}
	c.dropCtl(i)
	return p.exitCode
}

// Members returns the member names silo i reports (ListMembers), sorted.
func (c *Cluster) Members(ctx context.Context, i int) ([]string, error) {
	cl, err := c.ctlClient(ctx, i)
	if err != nil {
		return nil, err
	}
	ms, err := cl.Admin().Members(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ms))
	for _, m := range ms {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names, nil
}

// views returns what each Live silo reports as members, and whether they all
// report the same set.
func (c *Cluster) views(ctx context.Context) (map[string][]string, bool) {
	views := map[string][]string{}
	var first []string
	agree := true
	for n, i := range c.Live() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		names, err := c.Members(cctx, i)
		cancel()
		if err != nil {
			views[c.silos[i].Name] = []string{"error: " + err.Error()}
			agree = false
			continue
		}
		views[c.silos[i].Name] = names
		if n == 0 {
			first = names
		} else if !slices.Equal(first, names) {
			agree = false
		}
	}
	return views, agree
}

// WaitMembers waits until every Live silo reports the same n members.
func (c *Cluster) WaitMembers(n int) {
	c.tb.Helper()
	c.waitFor(fmt.Sprintf("%d members", n), func(ctx context.Context) (bool, string) {
		views, agree := c.views(ctx)
		if !agree || len(views) == 0 {
			return false, fmt.Sprint(views)
		}
		for _, v := range views {
			return len(v) == n, fmt.Sprint(views)
		}
		return false, ""
	})
}

// WaitView waits until every Live silo reports exactly the members names.
func (c *Cluster) WaitView(names ...string) {
	c.tb.Helper()
	want := slices.Sorted(slices.Values(names))
	c.waitFor(fmt.Sprintf("members %v", want), func(ctx context.Context) (bool, string) {
		views, agree := c.views(ctx)
		if !agree || len(views) == 0 {
			return false, fmt.Sprint(views)
		}
		for _, v := range views {
			return slices.Equal(v, want), fmt.Sprint(views)
		}
		return false, ""
	})
}

// WaitGone waits until no Live silo reports the silo named name as a
// member.
func (c *Cluster) WaitGone(name string) {
	c.tb.Helper()
	c.waitFor(name+" gone from the members", func(ctx context.Context) (bool, string) {
		views, _ := c.views(ctx)
		if len(views) == 0 {
			return false, "no live silo"
		}
		for _, v := range views {
			if slices.Contains(v, name) || len(v) > 0 && strings.HasPrefix(v[0], "error: ") {
				return false, fmt.Sprint(views)
			}
		}
		return true, ""
	})
}

// Ask asks the Journal agent at addr through silo i's gateway and returns
// the name of the silo that answered. It is safe for concurrent use.
func (c *Cluster) Ask(ctx context.Context, i int, addr string) (string, error) {
	cl, err := c.ctlClient(ctx, i)
	if err != nil {
		return "", err
	}
	r, err := cl.Ask(ctx, addr, &client.Message{Message: "where"})
	if err != nil {
		return "", err
	}
	return r.Message, nil
}

// WaitOwner waits until the Journal agent at addr answers from the silo
// named silo through the gateway of every Live silo.
func (c *Cluster) WaitOwner(addr, silo string) {
	c.tb.Helper()
	c.waitFor(fmt.Sprintf("%s on %s", addr, silo), func(ctx context.Context) (bool, string) {
		live := c.Live()
		if len(live) == 0 {
			return false, "no live silo"
		}
		var state []string
		ok := true
		for _, i := range live {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			got, err := c.Ask(cctx, i, addr)
			cancel()
			if err != nil {
				got = "error: " + err.Error()
			}
			if got != silo {
				ok = false
			}
			state = append(state, fmt.Sprintf("via %s: %s", c.silos[i].Name, got))
		}
		return ok, strings.Join(state, "; ")
	})
}

// WaitOwners waits until each address answers from its Owner among the Live
// silos, through every Live gateway.
func (c *Cluster) WaitOwners(addrs ...string) {
	c.tb.Helper()
	for _, a := range addrs {
		c.WaitOwner(a, c.Owner(a))
	}
}

// LogContains reports whether silo i's log has a line containing s now
// (all its incarnations: the process's log is one file).
func (c *Cluster) LogContains(i int, s string) bool {
	c.tb.Helper()
	b, err := os.ReadFile(c.Silo(i).LogPath)
	if err != nil {
		c.tb.Fatalf("testcluster: %v", err)
	}
	return strings.Contains(string(b), s)
}

// WaitLog waits until silo i's log (across its processes) has a line that
// contains s, and returns the first such line.
func (c *Cluster) WaitLog(i int, s string) string {
	c.tb.Helper()
	path := c.Silo(i).LogPath
	var found string
	c.waitFor(fmt.Sprintf("%q in %s's log", s, c.Silo(i).Name), func(context.Context) (bool, string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.Contains(line, s) {
				found = line
				return true, ""
			}
		}
		return false, "not yet"
	})
	return found
}
