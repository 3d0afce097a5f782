// Command client talks to an agentsilo cluster through its gateways.
//
//	client ask Echo:one "hello"              # prints the reply
//	client send Counter:c1 "add 5"
//	client -o json ask Progress:job "think"  # pushes on stderr, reply as JSON
//	client listen                            # print what agents push here
//	client create Pipeline:p --config stages=Echo:a,Echo:b
//	client agents --type Echo
//	client members
//	client --api-key $KEY acl add --owner bob --agent 'shared-*' --caller alice --perm Message
//	client acl check --caller alice --perm Message Echo:bob:shared-1
//
// Global flags may come before or after the command; --addr and --api-key
// default to $AGENTSILO_ADDR and $AGENTSILO_API_KEY. Exit codes: 0 ok; 2
// usage or InvalidArgument; 3 NotFound; 4 Unauthenticated or
// PermissionDenied; 5 DeadlineExceeded or Unavailable; 1 anything else.
// Errors go to stderr as `error: <code>: <message>`.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

var usage = fmt.Sprintf(`usage: client [global flags] COMMAND [args] [flags]

commands:
  ask AGENT TEXT [--type T] [--channel C] [--data-file F --data-type T] [--state k=v]...
                       send a request; print the reply (messages the agent
                       pushes meanwhile go to stderr)
  send AGENT TEXT [...]  send a one-way message (same flags as ask)
  event AGENT TEXT [...] send an event (same flags as ask)
  listen               print the messages pushed to this session until interrupted
  create AGENT [--config k=v]...
                       store an agent's configuration
  agents [--type T]    list the active agents
  members              list the silos of the cluster
  reminders AGENT      list an agent's durable reminders
  %s

global flags:
  --addr LIST          gateway addresses, comma-separated ($AGENTSILO_ADDR; default 127.0.0.1:7070)
  --api-key KEY        API key ($AGENTSILO_API_KEY)
  --as PRINCIPAL       principal to declare to a development gateway (its default: dev)
  --tls-ca FILE        CA certificates to verify the gateway (enables TLS)
  --tls-cert FILE, --tls-key FILE
                       client certificate and key (enables TLS)
  --timeout D          bound on each call (default 30s)
  -o text|json         output format (default text)
`, aclUsage)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// globals are the flags every command takes.
type globals struct {
	addr, apiKey, as       string
	tlsCA, tlsCert, tlsKey string
	timeout                time.Duration
	output                 string
	stdout, stderr         io.Writer
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "gateway addresses, comma-separated")
	fs.StringVar(&g.apiKey, "api-key", g.apiKey, "API key")
	fs.StringVar(&g.as, "as", g.as, "principal to declare")
	fs.StringVar(&g.tlsCA, "tls-ca", g.tlsCA, "CA certificates file")
	fs.StringVar(&g.tlsCert, "tls-cert", g.tlsCert, "client certificate file")
	fs.StringVar(&g.tlsKey, "tls-key", g.tlsKey, "client key file")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "bound on each call")
	fs.StringVar(&g.output, "o", g.output, "output format: text or json")
}

// usageError is a mistake on the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func run(args []string, stdout, stderr io.Writer) int {
	g := &globals{
		addr:    "127.0.0.1:7070",
		timeout: 30 * time.Second,
		output:  "text",
		stdout:  stdout,
		stderr:  stderr,
	}
	if v := os.Getenv("AGENTSILO_ADDR"); v != "" {
		g.addr = v
	}
	g.apiKey = os.Getenv("AGENTSILO_API_KEY")

	err := dispatch(g, args)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "error: %s\nrun 'client -h' for usage\n", ue.msg)
		return 2
	}
	code := errs.Code(err)
	msg := err.Error()
	var e *errs.Error
	if errors.As(err, &e) && e.Message() != "" {
		msg = e.Message()
	}
	fmt.Fprintf(stderr, "error: %s: %s\n", code, msg)
	return exitCode(code)
}

// exitCode maps a gRPC code to the exit codes of DESIGN.md.
func exitCode(c codes.Code) int {
	switch c {
	case codes.OK:
		return 0
	case codes.InvalidArgument:
		return 2
	case codes.NotFound:
		return 3
	case codes.Unauthenticated, codes.PermissionDenied:
		return 4
	case codes.DeadlineExceeded, codes.Unavailable:
		return 5
	}
	return 1
}

func dispatch(g *globals, args []string) error {
	fs := newFlagSet("client", g)
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() == 0 {
		return usagef("no command")
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "ask", "send", "event":
		return cmdMessage(g, cmd, rest)
	case "listen":
		return cmdListen(g, rest)
	case "create":
		return cmdCreate(g, rest)
	case "agents":
		return cmdAgents(g, rest)
	case "members":
		return cmdMembers(g, rest)
	case "reminders":
		return cmdReminders(g, rest)
	case "acl":
		return cmdACL(g, rest)
	case "help":
		return flag.ErrHelp
	}
	return usagef("unknown command %q", cmd)
}

func newFlagSet(name string, g *globals) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.register(fs)
	return fs
}

func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usagef("%v", err)
}

// parse parses args with fs, allowing flags after positional arguments, and
// returns the positional ones. Everything after "--" is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(err)
		}
		used := len(args) - fs.NArg()
		if used > 0 && args[used-1] == "--" {
			return append(pos, fs.Args()...), nil
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

// pairs is a repeatable k=v flag.
type pairs map[string]string

func (p pairs) String() string { return "" }

func (p pairs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", s)
	}
	p[k] = v
	return nil
}

// dial checks the global flags and opens a session.
func (g *globals) dial(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	if g.output != "text" && g.output != "json" {
		return nil, usagef("-o %q: want text or json", g.output)
	}
	if g.timeout <= 0 {
		return nil, usagef("--timeout %v: must be positive", g.timeout)
	}
	var addrs []string
	for _, a := range strings.Split(g.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, usagef("--addr: no gateway address")
	}
	opts = append(opts, client.WithTimeout(g.timeout))
	if g.as != "" {
		opts = append(opts, client.WithPrincipal(g.as))
	}
	if g.apiKey != "" {
		opts = append(opts, client.WithAPIKey(g.apiKey))
	}
	if g.tlsCA != "" || g.tlsCert != "" || g.tlsKey != "" {
		cfg, err := g.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	dctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return client.Dial(dctx, addrs, opts...)
}

func (g *globals) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if g.tlsCA != "" {
		pem, err := os.ReadFile(g.tlsCA)
		if err != nil {
			return nil, usagef("--tls-ca: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usagef("--tls-ca %s: no PEM certificates", g.tlsCA)
		}
	}
	if (g.tlsCert == "") != (g.tlsKey == "") {
		return nil, usagef("--tls-cert and --tls-key go together")
	}
	if g.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(g.tlsCert, g.tlsKey)
		if err != nil {
			return nil, usagef("--tls-cert/--tls-key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// printPush writes a pushed message: `<from> [<type>]: <text>`, or JSON.
func (g *globals) printPush(w io.Writer, m *client.Message) {
	if g.output == "json" {
		g.printJSON(w, m)
		return
	}
	if m.MessageType != "" {
		fmt.Fprintf(w, "%s [%s]: %s\n", m.From, m.MessageType, m.Message)
	} else {
		fmt.Fprintf(w, "%s: %s\n", m.From, m.Message)
	}
}

func (g *globals) printJSON(w io.Writer, m proto.Message) {
	b, err := protojson.Marshal(m)
	if err != nil {
		fmt.Fprintf(g.stderr, "error: %v\n", err)
		return
	}
	fmt.Fprintf(w, "%s\n", b)
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// cmdMessage runs ask, send and event.
func cmdMessage(g *globals, cmd string, args []string) error {
	fs := newFlagSet(cmd, g)
	m := &client.Message{State: map[string]string{}}
	var dataFile string
	fs.StringVar(&m.MessageType, "type", "", "message type")
	fs.StringVar(&m.Channel, "channel", "", "channel")
	fs.StringVar(&dataFile, "data-file", "", "file whose bytes are the message's data")
	fs.StringVar(&m.DataType, "data-type", "", "type of the data (MIME type or schema name)")
	fs.Var(pairs(m.State), "state", "state entry k=v (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("%s: want AGENT TEXT", cmd)
	}
	to := pos[0]
	m.Message = strings.Join(pos[1:], " ")
	if dataFile != "" {
		if m.Data, err = os.ReadFile(dataFile); err != nil {
			return usagef("--data-file: %v", err)
		}
	} else if m.DataType != "" {
		return usagef("--data-type needs --data-file")
	}
	ctx, stop := signalContext()
	defer stop()
	// Messages the agent pushes to this session meanwhile go to stderr.
	c, err := g.dial(ctx, client.WithOnMessage(func(p *client.Message) { g.printPush(g.stderr, p) }))
	if err != nil {
		return err
	}
	defer c.Close()
	switch cmd {
	case "send":
		return c.Send(ctx, to, m)
	case "event":
		return c.Event(ctx, to, m)
	}
	r, err := c.Ask(ctx, to, m)
	if err != nil {
		return err
	}
	if g.output == "json" {
		g.printJSON(g.stdout, r)
	} else {
		fmt.Fprintln(g.stdout, r.Message)
	}
	return nil
}

func cmdListen(g *globals, args []string) error {
	fs := newFlagSet("listen", g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("listen: unexpected argument %q", pos[0])
	}
	ctx, stop := signalContext()
	defer stop()
	c, err := g.dial(ctx, client.WithOnMessage(func(p *client.Message) { g.printPush(g.stdout, p) }))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(g.stderr, "listening on %s (interrupt to stop)\n", c.Address())
	<-ctx.Done()
	return nil
}

func cmdCreate(g *globals, args []string) error {
	fs := newFlagSet("create", g)
	cfg := map[string]string{}
	fs.Var(pairs(cfg), "config", "configuration entry k=v (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("create: want AGENT")
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		addr, err := c.CreateAgent(ctx, pos[0], cfg)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.CreateAgentResponse{Address: addr})
		} else {
			fmt.Fprintln(g.stdout, addr)
		}
		return nil
	})
}

func cmdAgents(g *globals, args []string) error {
	fs := newFlagSet("agents", g)
	typ := fs.String("type", "", "list only agents of this type")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("agents: unexpected argument %q", pos[0])
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		agents, err := c.Agents(ctx, *typ)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.ListAgentsResponse{Agents: agents})
			return nil
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ADDRESS\tSILO\tMAILBOX\tACTIVATED\tLAST ACTIVE")
		for _, a := range agents {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", a.Address, a.Silo, a.MailboxDepth,
				a.ActivatedAt.AsTime().Local().Format(time.DateTime), a.LastActive.AsTime().Local().Format(time.DateTime))
		}
		return tw.Flush()
	})
}

func cmdMembers(g *globals, args []string) error {
	fs := newFlagSet("members", g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("members: unexpected argument %q", pos[0])
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		members, err := c.Members(ctx)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.ListMembersResponse{Members: members})
			return nil
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSTATE\tGATEWAY\tPEER\tACTIVATIONS")
		for _, m := range members {
			name := m.Name
			if m.Self {
				name += " (self)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", name, m.State, m.GatewayAddr, m.PeerAddr, m.Activations)
		}
		return tw.Flush()
	})
}

// with dials a session for one command, runs f and closes the session. ctx
// ends on SIGINT or SIGTERM.
func (g *globals) with(f func(ctx context.Context, c *client.Client) error) error {
	ctx, stop := signalContext()
	defer stop()
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(ctx, c)
}

func cmdReminders(g *globals, args []string) error {
	fs := newFlagSet("reminders", g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("reminders: want one AGENT")
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		rs, err := c.Reminders(ctx, pos[0])
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.ListRemindersResponse{Reminders: rs})
			return nil
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tPERIOD\tNEXT\tTYPE\tMESSAGE")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Period.AsDuration(), r.Due.AsTime().Local().Format(time.DateTime), r.MessageType, r.Message)
		}
		return tw.Flush()
	})
}
