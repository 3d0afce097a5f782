package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// A silo program (Program.Run) keeps its gateway port and its HTTP port
// open for its whole run, across the silos it runs one after another (a
// fenced silo is closed and a new one started under a new lease; so is one
// that drained because the others could not reach it). Each silo serves
// the ports while it serves; before the first one serves, and from a fence
// until the next one serves, a stand-in does: /healthz answers 200,
// /readyz 503 with why (`fenced: ...`), /metrics the program's registry,
// and every gateway call fails with Unavailable saying why. So a liveness
// probe does not kill a process that waits for etcd, a readiness probe and
// clients are told why, and the metrics stay readable.
//
// A keptListener owns the real listener; its accept loop hands each
// connection to the handedListener current then: the stand-in's or a
// silo's. A silo's servers close only their handed listener.

// keptListener is a listener kept for the program's run, whose connections
// go to the handedListener that took it last.
type keptListener struct {
	lis    net.Listener
	ctx    context.Context // ends at close
	cancel context.CancelFunc
	done   chan struct{} // closed when the accept loop has ended

	mu      sync.Mutex
	cur     *handedListener // nil: connections are closed at once
	changed chan struct{}   // closed and replaced when cur changes
}

func keepListener(lis net.Listener) *keptListener {
	ctx, cancel := context.WithCancel(context.Background())
	k := &keptListener{lis: lis, ctx: ctx, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go k.acceptLoop()
	return k
}

// acceptLoop accepts connections until close, and hands each on.
func (k *keptListener) acceptLoop() {
	defer close(k.done)
	b := retry.New(5*time.Millisecond, time.Second, nil)
	for {
		c, err := k.lis.Accept()
		if err != nil {
			if k.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// One accept failed (out of file descriptors, a connection
			// aborted): pause and go on, as net/http and gRPC do.
			if !b.Wait(k.ctx, nil) {
				return
			}
			continue
		}
		b.Reset()
		k.deliver(c)
	}
}

// deliver hands c to the current handedListener, or closes it if none
// takes connections.
func (k *keptListener) deliver(c net.Conn) {
	for {
		k.mu.Lock()
		h, changed := k.cur, k.changed
		k.mu.Unlock()
		if h == nil {
			c.Close()
			return
		}
		select {
		case h.conns <- c:
			return
		case <-h.closed:
			k.release(h)
		case <-changed:
		case <-k.ctx.Done():
			c.Close()
			return
		}
	}
}

// handOut returns a listener of k's connections, which gets none until it
// takes k (take).
func (k *keptListener) handOut() *handedListener {
	return &handedListener{k: k, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// setCurrent makes h (nil: none) the listener new connections go to.
func (k *keptListener) setCurrent(h *handedListener) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.setCurrentLocked(h)
}

func (k *keptListener) setCurrentLocked(h *handedListener) {
	k.cur = h
	close(k.changed)
	k.changed = make(chan struct{})
}

// release makes h no longer current, if it is.
func (k *keptListener) release(h *handedListener) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur == h {
		k.setCurrentLocked(nil)
	}
}

// close closes the listener and waits for the accept loop.
func (k *keptListener) close() {
	k.cancel()
	k.lis.Close()
	<-k.done
}

// handedListener is the net.Listener a server of a keptListener's
// connections serves: it gets those accepted while it is current, and
// closing it leaves the kept listener open.
type handedListener struct {
	k      *keptListener
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// take makes h current: the connections accepted from now on are h's.
func (h *handedListener) take() { h.k.setCurrent(h) }

// Accept implements net.Listener.
func (h *handedListener) Accept() (net.Conn, error) {
	select {
	case <-h.closed:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.closed:
		return nil, net.ErrClosed
	case <-h.k.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: h gets no more connections; the kept
// listener stays open.
func (h *handedListener) Close() error {
	h.once.Do(func() {
		close(h.closed)
		h.k.release(h)
	})
	return nil
}

// Addr implements net.Listener.
func (h *handedListener) Addr() net.Addr { return h.k.lis.Addr() }

// takePorts makes the silo's listeners, when they are handed out by the
// program's kept ports, current: new connections come to this silo from
// now on, no longer to the stand-in.
func (s *Silo) takePorts() {
	for _, l := range []net.Listener{s.httpLis, s.gwLis} {
		if h, ok := l.(*handedListener); ok {
			h.take()
		}
	}
}

// listen opens a silo's listener on addr, or hands out kept's connections
// when the program keeps that port (kept not nil).
func listen(ctx context.Context, addr string, kept *keptListener) (net.Listener, error) {
	if kept != nil {
		return kept.handOut(), nil
	}
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}

// programPorts are the ports a silo program keeps, and the stand-in that
// serves them while no silo does.
type programPorts struct {
	gateway *keptListener
	http    *keptListener // nil without an HTTP address
	gwCfg   gateway.Config
	metrics *prometheus.Registry
	logger  *slog.Logger
	silo    string

	mu      sync.Mutex
	why     string    // what the stand-in says
	since   time.Time // since when
	lastErr error     // the last start that failed since
	fenced  bool      // from a fence until a silo serves again
	stand   *standIn  // serving, nil while a silo serves
	stopped sync.WaitGroup
}

// standIn is one stint of the stand-in's servers, on their listeners.
type standIn struct {
	gw          *gateway.StandIn
	http        *http.Server
	gwLis, hLis *handedListener
	wg          sync.WaitGroup
}

// take makes the stint's listeners current (again: a silo that took the
// ports may have failed to start).
func (st *standIn) take() {
	for _, l := range []*handedListener{st.gwLis, st.hLis} {
		if l != nil {
			l.take()
		}
	}
}

// keepPorts listens on the gateway's and the HTTP port of cfg, for the
// program's run. gw is the gateway's configuration, whose TLS and
// authentication the stand-in speaks; reg is the program's registry,
// which the stand-in serves at /metrics.
func keepPorts(ctx context.Context, cfg *SiloConfig, gw gateway.Config, reg *prometheus.Registry) (*programPorts, error) {
	var lc net.ListenConfig
	gl, err := lc.Listen(ctx, "tcp", cfg.GatewayAddr)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	p := &programPorts{gateway: keepListener(gl), gwCfg: gw, metrics: reg, logger: cfg.Logger, silo: cfg.Name}
	if cfg.HTTPAddr != "" {
		hl, err := lc.Listen(ctx, "tcp", cfg.HTTPAddr)
		if err != nil {
			p.gateway.close()
			return nil, fmt.Errorf("http: %w", err)
		}
		p.http = keepListener(hl)
	}
	fenced := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "agentsilo_fenced",
		Help: "1 from a fence of this program's silo until the silo it starts again under a new lease serves; its ports answer meanwhile (/readyz: 503 fenced: ...).",
	}, func() float64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.fenced {
			return 1
		}
		return 0
	})
	if err := reg.Register(fenced); err != nil {
		p.close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return p, nil
}

// standIn has the stand-in serve the ports, saying why (see reason), from
// now on; fenced says the silo fenced.
func (p *programPorts) standIn(why string, fenced bool) {
	p.mu.Lock()
	p.why, p.since, p.lastErr, p.fenced = why, time.Now(), nil, fenced
	p.mu.Unlock()
	p.serveStandIn()
}

// startFailed records that a start failed with err, which the stand-in
// tells too, and has it serve the ports again if that silo had taken them.
func (p *programPorts) startFailed(err error) {
	p.mu.Lock()
	p.lastErr = err
	p.mu.Unlock()
	p.serveStandIn()
}

// serveStandIn starts the stand-in's servers, unless they serve already,
// and makes them take the ports.
func (p *programPorts) serveStandIn() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stand != nil {
		p.stand.take()
		return
	}
	st := &standIn{}
	gw, err := gateway.NewStandIn(p.gwCfg, func() string { return "silo " + p.silo + " serves no calls: " + p.reason() })
	if err != nil {
		// Its port takes connections and closes them until a silo serves.
		p.logger.Error("the gateway's stand-in cannot start; the gateway port closes connections until a silo serves it", "err", err)
	} else {
		st.gw = gw
		st.gwLis = p.gateway.handOut()
		st.wg.Go(func() {
			if err := gw.Serve(st.gwLis); err != nil {
				p.logger.Warn("the gateway's stand-in failed", "err", err)
			}
		})
	}
	if p.http != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, p.reason(), http.StatusServiceUnavailable)
		})
		mux.Handle("GET /metrics", promhttp.HandlerFor(p.metrics, promhttp.HandlerOpts{
			ErrorLog: slog.NewLogLogger(p.logger.Handler(), slog.LevelWarn),
		}))
		unavailable := func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, p.reason(), http.StatusServiceUnavailable)
		}
		mux.HandleFunc("/ui", unavailable)
		mux.HandleFunc("/ui/", unavailable)
		st.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		st.hLis = p.http.handOut()
		st.wg.Go(func() {
			if err := st.http.Serve(st.hLis); !errors.Is(err, http.ErrServerClosed) {
				p.logger.Warn("the HTTP port's stand-in failed", "err", err)
			}
		})
	}
	st.take()
	p.stand = st
}

// served says that a silo serves the ports (it took them as its Start
// ended): the stand-in lets its connections go, in the background; its
// clients connect again, to the silo.
func (p *programPorts) served() {
	p.mu.Lock()
	st := p.stand
	p.stand, p.fenced, p.lastErr = nil, false, nil
	p.mu.Unlock()
	if st != nil {
		p.stopped.Go(func() { st.stop() })
	}
}

// stop stops the stint's servers and waits for them.
func (st *standIn) stop() {
	if st.gw != nil {
		st.gw.GracefulStop()
	}
	if st.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := st.http.Shutdown(ctx); err != nil {
			st.http.Close()
		}
		cancel()
	}
	st.wg.Wait()
}

// reason is what the stand-in says: why, since when, and the last failed
// start since.
func (p *programPorts) reason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.why + ", " + since(p.since, time.Now())
	if p.lastErr != nil {
		r += "; the last attempt failed: " + p.lastErr.Error()
	}
	return r
}

// close stops the stand-in and closes the ports, once the silo that
// served them has closed.
func (p *programPorts) close() {
	p.served()
	p.stopped.Wait()
	if p.http != nil {
		p.http.close()
	}
	p.gateway.close()
}
