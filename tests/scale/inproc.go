package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// inproc is N silos in this process, each with its own gateway, peer
// transport (gRPC on loopback), membership and etcd client.
type inproc struct {
	mu       sync.Mutex
	silos    []*cluster.Silo
	names    []string
	endpoint string
	prefix   string
	cl       *client.Client
	base     uint64 // the heap before the silos
	leaseTTL time.Duration
}

func (p *inproc) config(i int) (cluster.SiloConfig, *grain.Registry, error) {
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		return cluster.SiloConfig{}, nil, err
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = p.names[i]
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{p.endpoint}, Prefix: p.prefix}
	cfg.LeaseTTL = p.leaseTTL
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return cfg, reg, nil
}

// inprocFiles is about how many open files n silos in one process need:
// both ends of the two peer connections of every pair of silos, and the
// listeners and etcd connections of each.
func inprocFiles(n int) uint64 { return uint64(2*n*(n-1) + 16*n) }

func startInproc(ctx context.Context, n int, endpoint, prefix string, leaseTTL time.Duration) (harness, func(), error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && inprocFiles(n) > lim.Cur {
		return nil, nil, fmt.Errorf("%d silos in one process need about %d open files, over this process's limit of %d: raise it (ulimit -n) or use -mode procs", n, inprocFiles(n), lim.Cur)
	}
	p := &inproc{leaseTTL: leaseTTL, silos: make([]*cluster.Silo, n), names: make([]string, n), endpoint: endpoint, prefix: prefix, base: heap()}
	for i := range p.names {
		p.names[i] = fmt.Sprintf("silo-%03d", i)
	}
	closeAll := func() {
		if p.cl != nil {
			p.cl.Close()
		}
		var wg sync.WaitGroup
		for i := range p.silos {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.stop(context.Background(), i)
			}()
		}
		wg.Wait()
	}
	sem := make(chan struct{}, 2) // starts at once: each joins the gossip group, which a starved process fails
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- p.start(ctx, i)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	var addrs []string
	for _, s := range p.silos {
		addrs = append(addrs, s.GatewayAddr())
	}
	cl, err := client.Dial(ctx, addrs, client.WithPrincipal(testcluster.Principal))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	p.cl = cl
	return p, closeAll, nil
}

func (p *inproc) n() int            { return len(p.silos) }
func (p *inproc) name(i int) string { return p.names[i] }

func (p *inproc) silo(i int) *cluster.Silo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silos[i]
}

func (p *inproc) metrics(_ context.Context, i int) (string, error) {
	s := p.silo(i)
	if s == nil {
		return "", fmt.Errorf("%s is stopped", p.names[i])
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(s.Metrics(), promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String(), nil
}

// perSilo is the process's heap above what it held before the silos
// (the etcd in this process included) and its goroutines, over the silos.
func (p *inproc) perSilo(context.Context, int) (float64, float64, error) {
	h := float64(int64(heap()) - int64(p.base))
	return h / float64(p.n()), float64(runtime.NumGoroutine()) / float64(p.n()), nil
}

func (p *inproc) stop(ctx context.Context, i int) error {
	p.mu.Lock()
	s := p.silos[i]
	p.silos[i] = nil
	p.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Close(ctx)
}

func (p *inproc) start(ctx context.Context, i int) error {
	cfg, reg, err := p.config(i)
	if err != nil {
		return err
	}
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	p.mu.Lock()
	p.silos[i] = s
	p.mu.Unlock()
	return nil
}

func (p *inproc) ask(ctx context.Context, addr string) error {
	_, err := p.cl.Ask(ctx, addr, &client.Message{Message: "hi"})
	return err
}
