package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The gateway suite: an SDK Ask through a gateway (its session stream, API
// key, client grain, runtime and an agent's turn) against the floor a gRPC
// client and server on loopback set, a raw unary call (the health service's
// Check: one tiny request, one tiny reply, no work), interleaved in one run.
// Rows: grpc-unary (the anchor) and gateway, whose ratio_median is its rate
// over grpc-unary's (issue goal: at least 0.8).

func runGateway(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	rounds := fs.Int("rounds", 5, "interleaved rounds per N (one grpc-unary and one gateway window each)")
	warm := fs.Duration("warmup", 250*time.Millisecond, "unmeasured warm-up before each window")
	win := fs.Duration("window", time.Second, "measured window")
	grains := fs.Int("grains", 1000, "pre-activated agents the callers spread over")
	var ns []int
	fs.Func("n", "comma-separated caller counts (default 1,64)", func(s string) (err error) {
		ns, err = parseCounts(s)
		return err
	})
	run := fs.String("run", "", "run stamp to put in every JSON line")
	var prof profFlags
	prof.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(ns) == 0 {
		ns = []int{1, 64}
	}
	if *rounds < 1 || *grains < 1 {
		return errors.New("-rounds and -grains must be at least 1")
	}
	rt, err := newRuntime()
	if err != nil {
		return err
	}
	defer closeRuntime(rt)
	addrs := addresses(typeBench, "g", *grains)
	if _, err := activateAll(rt, addrs, 8); err != nil {
		return err
	}
	gw, stopGW, err := benchGateway(rt, nil)
	if err != nil {
		return err
	}
	defer stopGW()

	// The anchor: a plain gRPC server with the health service, and one
	// client connection to it, shared by the callers as the SDK's is.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	unary := func(int) callFunc {
		return func() error {
			_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
			return err
		}
	}

	stopProf, err := prof.start()
	if err != nil {
		return err
	}
	defer stopProf()
	for _, n := range ns {
		anchor := &series{bench: "grpc-unary", n: n}
		subject := &series{bench: "gateway", n: n, anchor: "grpc-unary"}
		interleave(*rounds, *warm, *win, false, n, anchor, subject, unary, clientCaller(gw, addrs, n))
		emit(out, anchor.row(*run))
		emit(out, subject.row(*run))
	}
	return nil
}
