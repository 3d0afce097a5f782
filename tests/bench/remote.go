package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/certs/certstest"
)

// The raw gRPC anchor: one bidirectional stream method whose messages are
// wrapperspb.Int64Value, described by hand so that no generated code is
// needed. The server answers every value with value+1 on the same stream.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "agentsilo.bench.Echo",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Echo",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, s grpc.ServerStream) error {
			for {
				var v wrapperspb.Int64Value
				if err := s.RecvMsg(&v); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				v.Value++
				if err := s.SendMsg(&v); err != nil {
					return err
				}
			}
		},
	}},
}

// echoClient shares one echo stream between callers: a lock serializes
// SendMsg (one gRPC message per request) and one reader hands each answer to
// the caller whose index rides in the value's high 32 bits.
type echoClient struct {
	conn    *grpc.ClientConn
	stream  grpc.ClientStream
	sendMu  sync.Mutex
	mu      sync.Mutex
	waiters map[int64]chan int64
	done    chan struct{}
}

func dialEcho(ctx context.Context, addr string) (*echoClient, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	st, err := conn.NewStream(ctx, &echoDesc.Streams[0], "/agentsilo.bench.Echo/Echo")
	if err != nil {
		conn.Close()
		return nil, err
	}
	c := &echoClient{conn: conn, stream: st, waiters: make(map[int64]chan int64), done: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *echoClient) read() {
	defer close(c.done)
	for {
		var v wrapperspb.Int64Value
		if err := c.stream.RecvMsg(&v); err != nil {
			return
		}
		c.mu.Lock()
		ch := c.waiters[v.Value>>32]
		c.mu.Unlock()
		if ch != nil {
			ch <- v.Value
		}
	}
}

func (c *echoClient) close() {
	c.conn.Close()
	<-c.done
}

// caller returns the call function of caller w: one value out, its echo back.
func (c *echoClient) caller(w int) callFunc {
	ch := make(chan int64, 1)
	c.mu.Lock()
	c.waiters[int64(w)] = ch
	c.mu.Unlock()
	var seq int64
	return func() error {
		seq = (seq + 1) & 0x7fffffff
		v := int64(w)<<32 | seq
		c.sendMu.Lock()
		err := c.stream.SendMsg(&wrapperspb.Int64Value{Value: v})
		c.sendMu.Unlock()
		if err != nil {
			return err
		}
		select {
		case got := <-ch:
			if got != v+1 {
				return fmt.Errorf("echo answered %d to %d", got, v)
			}
			return nil
		case <-c.done:
			return errors.New("echo stream closed")
		}
	}
}

// benchSilo starts a silo with the bench agent types on etcd at endpoint.
func benchSilo(ctx context.Context, name, endpoint string) (*cluster.Silo, error) {
	return benchSiloTLS(ctx, name, endpoint, "/bench/", cluster.PeerTLSConfig{})
}

// tlsPrefix is the etcd prefix of the pair of silos with peer mutual TLS:
// a cluster of its own beside the plain one.
const tlsPrefix = "/bench-tls/"

// peerTLSFiles are the certificate files of silo name in dir (see
// writePeerCerts).
func peerTLSFiles(dir, name string) cluster.PeerTLSConfig {
	return cluster.PeerTLSConfig{
		CertFile: filepath.Join(dir, name+".crt"),
		KeyFile:  filepath.Join(dir, name+".key"),
		CAFile:   filepath.Join(dir, "peer_CA.crt"),
	}
}

// writePeerCerts makes a CA and the certificates of silos a and b in dir.
func writePeerCerts(dir string) error {
	ca, err := certstest.NewCA(dir, "peer CA")
	if err != nil {
		return err
	}
	for _, name := range []string{"a", "b"} {
		if _, _, err := ca.Issue(name, []string{name}, nil); err != nil {
			return err
		}
	}
	return nil
}

// benchSiloTLS is benchSilo on etcd prefix prefix, with peer TLS tls.
func benchSiloTLS(ctx context.Context, name, endpoint, prefix string, tls cluster.PeerTLSConfig) (*cluster.Silo, error) {
	reg := grain.NewRegistry()
	if err := reg.Register(typeBench, func(grain.Host) (grain.Agent, error) { return &benchAgent{}, nil }); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = name
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{endpoint}, Prefix: prefix}
	cfg.PeerTLS = tls
	cfg.Logger = log
	cfg.Runtime.Logger = log
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// runNodeB is the second process of the remote suite: a silo and the raw
// echo server. It prints "ready <echo addr>" once both serve, and stops
// when its stdin closes (the first process ended) or after -lifetime.
func runNodeB(args []string) error {
	fs := flag.NewFlagSet("node-b", flag.ContinueOnError)
	endpoint := fs.String("etcd", "", "etcd endpoint")
	tlsDir := fs.String("peer-tls-dir", "", "also start a silo with peer mutual TLS, with the certificates in this directory")
	lifetime := fs.Duration("lifetime", 10*time.Minute, "exit after this long whatever happens")
	var prof profFlags
	prof.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	stopProf, err := prof.start()
	if err != nil {
		return err
	}
	defer stopProf()
	ctx, cancel := context.WithTimeout(context.Background(), *lifetime)
	defer cancel()
	s, err := benchSilo(ctx, "b", *endpoint)
	if err != nil {
		return err
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		s.Close(cctx)
	}()
	if *tlsDir != "" {
		st, err := benchSiloTLS(ctx, "b", *endpoint, tlsPrefix, peerTLSFiles(*tlsDir, "b"))
		if err != nil {
			return err
		}
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ccancel()
			st.Close(cctx)
		}()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	srv.RegisterService(&echoDesc, nil)
	go srv.Serve(lis)
	defer srv.Stop()
	// The envelope anchors on a server of their own, with the peer
	// server's flow-control windows.
	envLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	envSrv := grpc.NewServer(envServerOptions()...)
	envSrv.RegisterService(&envDesc, nil)
	go envSrv.Serve(envLis)
	defer envSrv.Stop()
	fmt.Printf("ready %s %s\n", lis.Addr(), envLis.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	<-ctx.Done()
	if b, e := peerBatches(s); b > 0 {
		logf("node-b wrote %.0f replies in %.0f stream messages (%.1f a message)", e, b, e/b)
	}
	return nil
}

// peerBatches reads s's counters of the stream messages it wrote to its
// peers and the envelopes in them.
func peerBatches(s *cluster.Silo) (batches, envelopes float64) {
	fams, err := s.Metrics().Gather()
	if err != nil {
		return 0, 0
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "agentsilo_peer_batches_total":
				batches += m.GetCounter().GetValue()
			case "agentsilo_peer_envelopes_total":
				envelopes += m.GetCounter().GetValue()
			}
		}
	}
	return batches, envelopes
}

// freePort returns a loopback address with a port that was free just now.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// runRemote is the remote suite (node-a): an embedded etcd, node-b started
// as a second process of this program, and a silo here; then, for each N,
// rounds of (grpc-stream window, remote window): the raw stream ping-pong
// to node-b, and Asks from this silo's runtime to agents that node-b owns.
func runRemote(args []string, out io.Writer) error {
	lf, err := parseLocalFlags(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "agentsilo-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ecfg := etcdstore.DefaultConfig()
	ecfg.DataDir = dir
	if ecfg.EmbeddedAddr, err = freePort(); err != nil {
		return err
	}
	if ecfg.EmbeddedPeerAddr, err = freePort(); err != nil {
		return err
	}
	ecfg.Logger = slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	etcd, err := etcdstore.Start(ctx, ecfg)
	if err != nil {
		return err
	}
	defer etcd.Close()
	endpoint := ecfg.EmbeddedAddr

	self, err := os.Executable()
	if err != nil {
		return err
	}
	nodeB := append([]string{"node-b", "-etcd", endpoint}, lf.nodeB...)
	if lf.peerTLS {
		if err := writePeerCerts(dir); err != nil {
			return err
		}
		nodeB = append(nodeB, "-peer-tls-dir", dir)
	}
	cmd := exec.Command(self, nodeB...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// Each window accounts the CPU of both processes (node-a's includes the
	// embedded etcd, idle but for leases).
	cpuProcs = []cpuProc{{name: "node-a"}, {name: "node-b", pid: cmd.Process.Pid}}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			logf("node-b: %v", err)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fmt.Errorf("node-b did not start: %w", err)
	}
	addrsLine, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	echoAddr, envAddr, ok2 := strings.Cut(addrsLine, " ")
	if !ok || !ok2 {
		return fmt.Errorf("node-b said %q", line)
	}

	a, err := benchSilo(ctx, "a", endpoint)
	if err != nil {
		return err
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		a.Close(cctx)
	}()
	// 1,000 agents that node-b owns: every call crosses between silos.
	var addrs []string
	for i := 0; len(addrs) < lf.grains; i++ {
		to := fmt.Sprintf("%s:%s:r%d", typeBench, owner, i)
		if cluster.Owner(to, []string{"a", "b"}) == "b" {
			addrs = append(addrs, to)
		}
	}
	rt := a.Runtime()
	if err := activateRemote(ctx, rt, addrs); err != nil {
		return err
	}
	var tlsRT *grain.Runtime
	if lf.peerTLS {
		at, err := benchSiloTLS(ctx, "a", endpoint, tlsPrefix, peerTLSFiles(dir, "a"))
		if err != nil {
			return err
		}
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ccancel()
			at.Close(cctx)
		}()
		tlsRT = at.Runtime()
		if err := activateRemote(ctx, tlsRT, addrs); err != nil {
			return err
		}
	}
	echo, err := dialEcho(ctx, echoAddr)
	if err != nil {
		return err
	}
	defer echo.close()
	envOne, err := dialEnv(ctx, envAddr, false)
	if err != nil {
		return err
	}
	defer envOne.close()
	envBatch, err := dialEnv(ctx, envAddr, true)
	if err != nil {
		return err
	}
	defer envBatch.close()

	stopProf, err := lf.prof.start()
	if err != nil {
		return err
	}
	defer stopProf()
	for _, n := range lf.ns {
		// Rounds of the three anchors and the cross-silo Ask: the 8-byte
		// integer echo, the same envelopes as the Ask's one per stream
		// message, and batched as the peer stream batches them (the
		// remote row's anchor; see envanchor.go).
		anchor := &series{bench: "grpc-stream", n: n}
		one := &series{bench: "grpc-env", n: n, anchor: "grpc-stream"}
		batched := &series{bench: "grpc-env-batch", n: n, anchor: "grpc-stream", others: []string{"grpc-env"}}
		subject := &series{bench: "remote", n: n, anchor: "grpc-env-batch", others: []string{"grpc-stream", "grpc-env"}}
		ss := []*series{anchor, one, batched, subject}
		callers := []func(int) callFunc{echo.caller, envOne.caller(addrs, n), envBatch.caller(addrs, n), localCaller(rt, addrs, n)}
		if lf.only != "" {
			i := slices.IndexFunc(ss, func(s *series) bool { return s.bench == lf.only })
			if i < 0 {
				return fmt.Errorf("-only %q: no such row", lf.only)
			}
			ss, callers = []*series{{bench: lf.only, n: n}}, callers[i:i+1]
		}
		b0, e0 := peerBatches(a)
		interleaveAll(lf.rounds, lf.warmup, lf.window, lf.yield, n, ss, callers)
		if b1, e1 := peerBatches(a); b1 > b0 {
			logf("n=%d: node-a wrote %.0f requests in %.0f stream messages (%.1f a message)", n, e1-e0, b1-b0, (e1-e0)/(b1-b0))
		}
		for _, s := range ss {
			emit(out, s.row(lf.run))
		}
		if tlsRT != nil {
			// What mutual TLS costs: the plain pair is the anchor.
			plain := &series{bench: "remote", n: n}
			secured := &series{bench: "remote-mtls", n: n, anchor: "remote"}
			interleave(lf.rounds, lf.warmup, lf.window, lf.yield, n, plain, secured,
				localCaller(rt, addrs, n), localCaller(tlsRT, addrs, n))
			emit(out, plain.row(lf.run))
			emit(out, secured.row(lf.run))
		}
	}
	return nil
}

// activateRemote makes every agent of addrs answer once from rt's silo, and
// checks that none of them is hosted there. The first calls may race the
// other silo's view of this one: they are retried.
func activateRemote(ctx context.Context, rt *grain.Runtime, addrs []string) error {
	for {
		if _, err := activateAll(rt, addrs, 8); err == nil {
			break
		} else if ctx.Err() != nil {
			return err
		}
	}
	if n := rt.Len(); n != 0 {
		return fmt.Errorf("%d of the remote agents were activated on node-a", n)
	}
	logf("remote: %d agents activated on node-b", len(addrs))
	return nil
}
