package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// runGRPC measures what gRPC alone costs per idle connection, the floor
// under a silo's idle peer: n client connections to one server on
// loopback, each with one open, idle stream (a health Watch), with the
// flow-control windows and keep-alives the peer transport sets. It prints
// the goroutines and heap per connection, client and server ends together,
// and which functions those goroutines run.
func runGRPC(ctx context.Context, n int) error {
	const window = 4 << 20 // the peer transport's peerWindow
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(lis)
	defer srv.Stop()

	g0, h0 := runtime.NumGoroutine(), heap()
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}))
		if err != nil {
			return err
		}
		conns = append(conns, c)
		w, err := healthpb.NewHealthClient(c).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if _, err := w.Recv(); err != nil { // the stream is open at both ends
			return err
		}
	}
	g1, h1 := runtime.NumGoroutine(), heap()
	emit(row{Bench: "scale-grpc-conn-goroutines", N: n, Median: float64(g1-g0) / float64(n), Unit: "goroutines",
		Note: "per idle connection with one open stream, client and server ends together: " + creators(n)})
	emit(row{Bench: "scale-grpc-conn-heap", N: n, Median: float64(int64(h1)-int64(h0)) / float64(n) / 1024, Unit: "KiB",
		Note: "per idle connection with one open stream, client and server ends together (live heap after GC)"})
	return nil
}

// creators groups the goroutines by the function that started them, those
// with at least n of them (one or more per connection).
func creators(n int) string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		return err.Error()
	}
	count := map[string]int{}
	for _, g := range strings.Split(buf.String(), "\n\n") {
		i := strings.Index(g, "\ncreated by ")
		if i < 0 {
			continue
		}
		line := g[i+len("\ncreated by "):]
		if j := strings.IndexAny(line, " \n"); j > 0 {
			line = line[:j]
		}
		count[line]++
	}
	var parts []string
	for f, c := range count {
		if c >= n {
			parts = append(parts, fmt.Sprintf("%.1f %s", float64(c)/float64(n), f))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
