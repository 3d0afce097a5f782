package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// rawEcho is the baseline: a Peer stream that echoes each batch at once.
type rawEcho struct {
	agentsilov1.UnimplementedPeerServer
}

func (rawEcho) Stream(s agentsilov1.Peer_StreamServer) error {
	for {
		b, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := s.Send(b); err != nil {
			return err
		}
	}
}

// BenchmarkTransport compares a cross-transport Ask (two transports over
// loopback gRPC) with a raw gRPC bidi stream ping-pong (one message per
// request, one stream per caller), at 1 and 64 concurrent callers.
//
//	go test -bench Transport -run XXX ./cluster/
func BenchmarkTransport(b *testing.B) {
	msg := func() *agentsilov1.AgentMessage {
		return &agentsilov1.AgentMessage{To: "Echo:acme:x", From: "Caller:acme:y", Message: "ping", Kind: agentsilov1.Kind_KIND_REQUEST, Id: "0190b6a4-0000-7000-8000-000000000000"}
	}
	run := func(b *testing.B, n int, op func(ctx context.Context, worker int) error) {
		ctx := context.Background()
		var wg sync.WaitGroup
		var failed sync.Once
		per := b.N / n
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		defer func() {
			// CPU time of the process (both ends) per call: steadier than
			// ns/op on a machine others share.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		}()
		for w := range n {
			count := per
			if w == 0 {
				count += b.N % n
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range count {
					if err := op(ctx, w); err != nil {
						failed.Do(func() { b.Error(err) })
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("ask/N=%d", n), func(b *testing.B) {
			hb := &testHandler{request: func(_ context.Context, _ string, env *Envelope) (*agentsilov1.AgentMessage, error) {
				r := env.Message.Response()
				r.Message = "pong"
				return r, nil
			}}
			srv := startSilo(b, "b", "127.0.0.2:0", hb, nil, nil)
			cli := startSilo(b, "a", "127.0.0.1:0", nil, nil, nil)
			if _, err := cli.tr.Ask(context.Background(), srv.addr, &Envelope{Message: msg()}); err != nil {
				b.Fatal(err)
			}
			before := cli.tr.Stats()
			run(b, n, func(ctx context.Context, _ int) error {
				_, err := cli.tr.Ask(ctx, srv.addr, &Envelope{Message: msg()})
				return err
			})
			b.StopTimer()
			s := cli.tr.Stats()
			if batches := s.Batches - before.Batches; batches > 0 {
				b.ReportMetric(float64(s.Envelopes-before.Envelopes)/float64(batches), "env/batch")
			}
		})
		b.Run(fmt.Sprintf("ask-async/N=%d", n), func(b *testing.B) {
			// As the silo's handler: requests taken without a goroutine
			// (here, answered at once), so no worker runs them.
			hb := newOrderedAsync()
			hb.noLog = true
			srv := startSilo(b, "b", "127.0.0.2:0", &hb.testHandler, nil, nil)
			cli := startSilo(b, "a", "127.0.0.1:0", nil, nil, nil)
			asyncMsg := func() *agentsilov1.AgentMessage {
				m := msg()
				m.Message = "pingt"
				return m
			}
			if _, err := cli.tr.Ask(context.Background(), srv.addr, &Envelope{Message: asyncMsg()}); err != nil {
				b.Fatal(err)
			}
			before := cli.tr.Stats()
			run(b, n, func(ctx context.Context, _ int) error {
				_, err := cli.tr.Ask(ctx, srv.addr, &Envelope{Message: asyncMsg()})
				return err
			})
			b.StopTimer()
			s := cli.tr.Stats()
			if batches := s.Batches - before.Batches; batches > 0 {
				b.ReportMetric(float64(s.Envelopes-before.Envelopes)/float64(batches), "env/batch")
			}
		})
		b.Run(fmt.Sprintf("grpc-stream/N=%d", n), func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.2:0")
			if err != nil {
				b.Fatal(err)
			}
			gs := grpc.NewServer()
			agentsilov1.RegisterPeerServer(gs, rawEcho{})
			go func() { _ = gs.Serve(lis) }()
			defer gs.Stop()
			conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			streams := make([]agentsilov1.Peer_StreamClient, n)
			for i := range streams {
				if streams[i], err = agentsilov1.NewPeerClient(conn).Stream(ctx); err != nil {
					b.Fatal(err)
				}
			}
			run(b, n, func(_ context.Context, w int) error {
				s := streams[w]
				if err := s.Send(&agentsilov1.PeerBatch{Envelopes: []*Envelope{{Kind: agentsilov1.Kind_KIND_REQUEST, CallId: 1, Message: msg()}}}); err != nil {
					return err
				}
				r, err := s.Recv()
				if err == nil && len(r.Envelopes) != 1 {
					err = fmt.Errorf("echo of %d envelopes", len(r.Envelopes))
				}
				return err
			})
			b.StopTimer()
			for _, s := range streams {
				_ = s.CloseSend()
			}
		})
	}
}

// cpuTime returns the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
