// Command silo runs one agentsilo silo: the grain runtime with the demo agent
// types of package examples, and the client gateway.
//
//	silo                                  # gateway on 127.0.0.1:7070
//	silo --gateway-addr 127.0.0.1:7080 --http-addr 127.0.0.1:8081
//	silo --gateway-addr 0.0.0.0:7070 --auth-file keys.json --acl-file acl.json
//
// Every flag can also be set from the environment as SILO_ plus its name in
// upper snake case (SILO_GATEWAY_ADDR=...); a flag on the command line wins.
// SIGTERM or SIGINT shuts the silo down gracefully within --shutdown-timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/membership"
	"github.com/agentsilo/agentsilo/examples"
	"github.com/agentsilo/agentsilo/grain"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	// Hidden test flag: --journal FILE registers the Journal agent type.
	args, journal, err := cutHiddenFlag(args, "journal")
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 2
	}
	cfg, logger, withDemo, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 2
	}
	reg := grain.NewRegistry()
	if err := examples.Register(reg); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	if journal != "" {
		if err := examples.RegisterJournal(reg, journal); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 2
	}
	if err := s.Start(ctx); err != nil {
		logger.Error("silo failed to start", "err", err)
		return 1
	}
	logger.Info("silo serving", "name", cfg.Name, "gateway", s.GatewayAddr(), "http", s.HTTPAddr(), "types", strings.Join(reg.Types(), ","))
	if withDemo {
		if err := demo(ctx, s.GatewayAddr(), os.Stdout); err != nil {
			logger.Error("demo", "err", err)
		}
	}

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	case runErr = <-s.Err():
		logger.Error("silo failed", "err", runErr)
		if errors.Is(runErr, cluster.ErrFenced) {
			// Another silo may take over this one's agents from now on:
			// stop at once, as a crash would, rather than run their
			// OnDeactivate. A supervisor restarts the silo, which joins
			// again under a new lease.
			return 1
		}
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := s.Close(sctx); err != nil {
		logger.Error("shutdown", "err", err)
		return 1
	}
	logger.Info("silo stopped")
	if runErr != nil {
		return 1
	}
	return 0
}

// parseFlags reads flags, with SILO_* environment variables as defaults.
func parseFlags(args []string, stderr io.Writer) (cluster.SiloConfig, *slog.Logger, bool, error) {
	cfg := cluster.DefaultSiloConfig()
	fs := flag.NewFlagSet("silo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Name, "name", cfg.Name, "silo name (default: the host name)")
	fs.StringVar(&cfg.GatewayAddr, "gateway-addr", cfg.GatewayAddr, "client gateway listen address (gRPC, with health and reflection)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP listen address for /metrics, /healthz and /readyz (empty: off)")
	fs.BoolVar(&cfg.Insecure, "insecure", cfg.Insecure, "accept self-declared principals on a non-loopback gateway address")
	cfg.PeerAddr, cfg.GossipAddr = "127.0.0.1:7071", "127.0.0.1:7946"
	fs.StringVar(&cfg.PeerAddr, "peer-addr", cfg.PeerAddr, "silo-to-silo transport listen address (gRPC)")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "gossip (memberlist) bind address, IP:port, UDP and TCP")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "IP that other silos and clients reach this silo at (default: the listen addresses' hosts)")
	join := fs.String("join", "", "comma-separated gossip seeds, host:port or DNS names expanded to all their addresses")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", membership.DefaultLeaseTTL, "membership lease TTL in etcd; a silo fences itself after a third of it without renewal")
	fs.BoolVar(&cfg.FaultInjection, "fault-injection", false, "tests only: serve POST /debug/partition?on=true|false on --http-addr")
	endpoints := fs.String("etcd-endpoints", "", "comma-separated endpoints of an external etcd (empty: run an embedded etcd in --data-dir)")
	fs.StringVar(&cfg.Etcd.DataDir, "data-dir", cfg.Etcd.DataDir, "data directory of the embedded etcd")
	fs.StringVar(&cfg.Etcd.EmbeddedAddr, "embedded-etcd-addr", cfg.Etcd.EmbeddedAddr, "client address of the embedded etcd, for further local silos' --etcd-endpoints")
	fs.StringVar(&cfg.Etcd.Prefix, "etcd-prefix", cfg.Etcd.Prefix, "prefix of every etcd key")
	fs.DurationVar(&cfg.MinReminderPeriod, "min-reminder-period", cfg.MinReminderPeriod, "shortest reminder period accepted (lower only for tests)")
	fs.DurationVar(&cfg.Runtime.IdleTimeout, "idle-timeout", cfg.Runtime.IdleTimeout, "deactivate an agent after this long without messages")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "bound on graceful shutdown")
	fs.IntVar(&cfg.Runtime.MailboxSize, "mailbox-size", cfg.Runtime.MailboxSize, "bound of each agent's mailbox")
	fs.IntVar(&cfg.Runtime.MaxMessageSize, "max-message-size", cfg.Runtime.MaxMessageSize, "largest message in bytes")
	fs.DurationVar(&cfg.Runtime.AskTimeout, "ask-timeout", cfg.Runtime.AskTimeout, "default Ask deadline")
	// Security: the ACL's seed, and how the gateway authenticates clients.
	fs.StringVar(&cfg.ACLFile, "acl-file", cfg.ACLFile, "FabrCore ACL JSON ({\"Rules\": [...], \"Groups\": {...}}) stored in etcd when no ACL is there yet")
	fs.StringVar(&cfg.Gateway.Auth.KeyFile, "auth-file", cfg.Gateway.Auth.KeyFile, "API-key file: {\"keys\": [{\"sha256\": HEX, \"principal\": P, \"groups\": [...]}]}")
	fs.StringVar(&cfg.Gateway.Auth.TLSCert, "tls-cert", cfg.Gateway.Auth.TLSCert, "gateway TLS certificate file (PEM)")
	fs.StringVar(&cfg.Gateway.Auth.TLSKey, "tls-key", cfg.Gateway.Auth.TLSKey, "gateway TLS key file (PEM)")
	fs.StringVar(&cfg.Gateway.Auth.TLSClientCA, "tls-client-ca", cfg.Gateway.Auth.TLSClientCA, "CA file for client certificates (mutual TLS; principal = subject CN, else first DNS name)")
	withDemo := fs.Bool("demo", false, "after start, call the demo agents through the gateway and print what they answer")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: silo [flags]\n\nEvery flag may also be set as SILO_<NAME> in the environment.\n\n")
		fs.PrintDefaults()
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "SILO_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %v", name, v, err)
			}
		}
	})
	if envErr != nil {
		return cfg, nil, false, envErr
	}
	if err := fs.Parse(args); err != nil {
		return cfg, nil, false, err
	}
	if fs.NArg() > 0 {
		return cfg, nil, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *endpoints != "" {
		cfg.Etcd.Endpoints = strings.Split(*endpoints, ",")
	}
	if *join != "" {
		cfg.Join = strings.Split(*join, ",")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return cfg, nil, false, fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch *logFormat {
	case "text":
		h = slog.NewTextHandler(stderr, opts)
	case "json":
		h = slog.NewJSONHandler(stderr, opts)
	default:
		return cfg, nil, false, fmt.Errorf("--log-format %q: want text or json", *logFormat)
	}
	logger := slog.New(h)
	cfg.Logger = logger
	cfg.Runtime.Logger = logger
	return cfg, logger, *withDemo, nil
}
