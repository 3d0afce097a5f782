package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/agentsilo/agentsilo/internal/oidctest"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// BenchmarkGatewayAskToken is the figure of OpenID tokens: the gateway's
// unary Ask of an Echo agent, authenticated by an API key and by a bearer
// token of an OpenID provider (its keys cached after the first call),
// alternating call by call in one run so both see the same machine. It
// reports each one's p50 and their ratio (token over key). A session's
// calls (the SDK's Ask) are authenticated once, when the session opens,
// so this unary Ask is where a token costs per call.
//
//	go test ./cluster -run '^$' -bench GatewayAskToken -benchtime 20000x
func BenchmarkGatewayAskToken(b *testing.B) {
	p, err := oidctest.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	s := identitySilo(b, p)
	conn, err := grpc.NewClient(s.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	gw := agentsilov1.NewGatewayClient(conn)
	c := p.Standard("bob", "agentsilo", time.Hour)
	c["groups"] = []string{"finance"}
	c["scope"] = "openid payments:read"
	tok, err := p.Sign(c)
	if err != nil {
		b.Fatal(err)
	}
	key := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("x-api-key", "bob-key"))
	bearer := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
	req := &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Echo:bob:x", Message: "hi"}}
	ask := func(ctx context.Context) time.Duration {
		start := time.Now()
		if _, err := gw.Ask(ctx, req); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 200 { // warm up: activation, connections, the provider's keys
		ask(key)
		ask(bearer)
	}
	keyTimes := make([]time.Duration, 0, b.N)
	tokTimes := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			keyTimes = append(keyTimes, ask(key))
			tokTimes = append(tokTimes, ask(bearer))
		} else {
			tokTimes = append(tokTimes, ask(bearer))
			keyTimes = append(keyTimes, ask(key))
		}
	}
	b.StopTimer()
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	k, tk := p50(keyTimes), p50(tokTimes)
	b.ReportMetric(float64(k.Microseconds()), "key-p50-µs")
	b.ReportMetric(float64(tk.Microseconds()), "token-p50-µs")
	b.ReportMetric(float64(tk)/float64(k), "token/key")
}
