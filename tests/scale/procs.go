package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// procs is N silo processes started by the process tests' harness (the
// silo binary built with its test hooks; each on its own loopback address).
type procs struct {
	c    *testcluster.Cluster
	cl   *client.Client
	http *http.Client
}

// startProcs starts n silo processes on the etcd at endpoint, window at
// a time if window is positive (testcluster's StartConcurrency). The
// closer kills them.
func startProcs(ctx context.Context, n, window int, endpoint, prefix string, leaseTTL time.Duration) (harness, func(), error) {
	var args []string
	if leaseTTL > 0 {
		args = append(args, "--lease-ttl", leaseTTL.String())
	}
	ready := make(chan *procs, 1)
	done := make(chan struct{})
	finished := make(chan bool, 1)
	go func() {
		finished <- testcluster.Run(ctx, func(tb testcluster.TB) {
			c := testcluster.Start(tb, testcluster.Options{Silos: n, EtcdEndpoints: []string{endpoint}, EtcdPrefix: prefix, Args: args, WaitTimeout: 5 * time.Minute, StartConcurrency: window})
			ready <- &procs{c: c, cl: c.Client(tb), http: &http.Client{Timeout: 10 * time.Second}}
			<-done
		})
	}()
	select {
	case p := <-ready:
		return p, func() { close(done); <-finished }, nil
	case <-finished:
		return nil, nil, errors.New("the silo processes did not start (see above)")
	}
}

func (p *procs) n() int            { return p.c.Len() }
func (p *procs) name(i int) string { return p.c.Silo(i).Name }
func (p *procs) pid(i int) int     { return p.c.PID(i) }

func (p *procs) metrics(ctx context.Context, i int) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.c.Silo(i).HTTPAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (p *procs) perSilo(ctx context.Context, i int) (float64, float64, error) {
	text, err := p.metrics(ctx, i)
	if err != nil {
		return 0, 0, err
	}
	h, _ := metric(text, "go_memstats_heap_inuse_bytes", "")
	g, _ := metric(text, "go_goroutines", "")
	return h, g, nil
}

// call runs f, which ends its goroutine on failure (the harness's Fatalf).
func call(f func()) error {
	ok := false
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		f()
		ok = true
	}()
	<-ch
	if !ok {
		return errors.New("the silo harness failed (see above)")
	}
	return nil
}

func (p *procs) stop(_ context.Context, i int) error  { return call(func() { p.c.Stop(i) }) }
func (p *procs) start(_ context.Context, i int) error { return call(func() { p.c.Restart(i) }) }

func (p *procs) ask(ctx context.Context, addr string) error {
	_, err := p.cl.Ask(ctx, addr, &client.Message{Message: "hi"})
	return err
}
