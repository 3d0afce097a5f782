package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/gateway"
)

// The acl suite: end-to-end Ask through a gateway with the ACL on versus
// off, interleaved in one run. Both gateways serve the same runtime and
// authenticate the same API key; the caller (alice) asks agents of another
// owner (bench), so with the ACL on every call is a cross-owner check,
// matched by the last of -rules rules. Rows: acl-off (the anchor) and
// acl-on, whose ratio_median is its rate over acl-off's.

const benchKey = "bench-key"

func runACL(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("acl", flag.ContinueOnError)
	rounds := fs.Int("rounds", 5, "interleaved rounds per N (one acl-off and one acl-on window each)")
	warm := fs.Duration("warmup", 250*time.Millisecond, "unmeasured warm-up before each window")
	win := fs.Duration("window", time.Second, "measured window")
	grains := fs.Int("grains", 1000, "pre-activated agents the callers spread over")
	rules := fs.Int("rules", 1000, "rules in the ACL; the last one grants the calls")
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
	if *rounds < 1 || *grains < 1 || *rules < 1 {
		return errors.New("-rounds, -grains and -rules must be at least 1")
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
	authority, err := benchAuthority(*rules)
	if err != nil {
		return err
	}
	defer authority.Close()
	off, stopOff, err := benchGateway(rt, nil)
	if err != nil {
		return err
	}
	defer stopOff()
	on, stopOn, err := benchGateway(rt, authority)
	if err != nil {
		return err
	}
	defer stopOn()

	stopProf, err := prof.start()
	if err != nil {
		return err
	}
	defer stopProf()
	for _, n := range ns {
		anchor := &series{bench: "acl-off", n: n}
		subject := &series{bench: "acl-on", n: n, anchor: "acl-off"}
		interleave(*rounds, *warm, *win, false, n, anchor, subject, clientCaller(off, addrs, n), clientCaller(on, addrs, n))
		emit(out, anchor.row(*run))
		emit(out, subject.row(*run))
	}
	return nil
}

// benchAuthority is an ACL of n rules in memory: n-1 for other owners and
// callers, then the one that lets alice message bench's agents.
func benchAuthority(n int) (*acl.Authority, error) {
	var d acl.Document
	for i := range n - 1 {
		r := acl.Rule{OwnerPattern: fmt.Sprintf("owner-%d", i), AgentPattern: "agent-*", CallerPattern: fmt.Sprintf("user-%d", i), Permission: acl.Message}
		if i%10 == 9 {
			r.OwnerPattern = fmt.Sprintf("team-%d*", i)
		}
		d.Rules = append(d.Rules, r)
	}
	d.Rules = append(d.Rules, acl.Rule{OwnerPattern: owner, AgentPattern: "*", CallerPattern: "alice", Permission: acl.Message})
	store := acl.NewMemStore()
	if _, err := store.Put(context.Background(), d, 0); err != nil {
		return nil, err
	}
	a, err := acl.NewAuthority(acl.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// benchGateway serves rt on a loopback gateway that authenticates benchKey
// as alice, with the ACL a (nil: none), and returns an SDK client of it.
func benchGateway(rt *grain.Runtime, a *acl.Authority) (*client.Client, func(), error) {
	h := sha256.Sum256([]byte(benchKey))
	cfg := gateway.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Auth.Keys = []auth.APIKey{{SHA256: hex.EncodeToString(h[:]), Principal: "alice"}}
	cfg.ACL = a
	cfg.Logger = slog.New(slog.DiscardHandler)
	sessions, err := gateway.NewSessions(cfg, "")
	if err != nil {
		return nil, nil, err
	}
	gw, err := gateway.New(cfg, rt, sessions)
	if err != nil {
		return nil, nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		gw.Stop()
		return nil, nil, err
	}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(lis) }()
	stopGW := func() {
		gw.Stop()
		<-served
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{lis.Addr().String()}, client.WithAPIKey(benchKey))
	if err != nil {
		stopGW()
		return nil, nil, err
	}
	return c, func() { c.Close(); stopGW() }, nil
}

// clientCaller asks the bench agents through c, each caller walking its own
// way through addrs.
func clientCaller(c *client.Client, addrs []string, n int) func(w int) callFunc {
	return func(w int) callFunc {
		next := cursor(w, n, len(addrs))
		var v uint64
		return func() error {
			v++
			m := &client.Message{Data: binary.LittleEndian.AppendUint64(make([]byte, 0, 8), v)}
			r, err := c.Ask(context.Background(), addrs[next()], m)
			if err != nil {
				return err
			}
			if len(r.Data) != 8 || binary.LittleEndian.Uint64(r.Data) != v+1 {
				return fmt.Errorf("answer %x to %d", r.Data, v)
			}
			return nil
		}
	}
}
