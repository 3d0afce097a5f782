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
//	git log -1 | client ask Summarizer:s   # the message from stdin
//	client help ask                          # a command's usage and flags
//
// Global flags may come before or after the command; --addr, --api-key and
// --token default to $AGENTSILO_ADDR, $AGENTSILO_API_KEY and
// $AGENTSILO_TOKEN. Exit codes: 0 ok; 2
// usage or InvalidArgument; 3 NotFound; 4 Unauthenticated or
// PermissionDenied, and a denial from acl check; 5 DeadlineExceeded or
// Unavailable; 1 anything else. Errors go to stderr as
// `error: <code>: <message>`.
//
// The commands are listed in help.go, each with its help; each runs in a
// cmd function of its own (acl ones in acl.go).
package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// globals are the flags every command takes.
type globals struct {
	addr, apiKey, token, as string
	tlsCA, tlsCert, tlsKey  string
	timeout                 time.Duration
	output                  string
	stdin                   io.Reader
	stdout, stderr          io.Writer
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "gateway addresses, comma-separated (host:port, or a host for port 7070)")
	fs.StringVar(&g.apiKey, "api-key", g.apiKey, "API key")
	fs.StringVar(&g.token, "token", g.token, "bearer token of the cluster's OpenID provider")
	fs.StringVar(&g.as, "as", g.as, "principal to declare")
	fs.StringVar(&g.tlsCA, "tls-ca", g.tlsCA, "CA certificates file")
	fs.StringVar(&g.tlsCert, "tls-cert", g.tlsCert, "client certificate file")
	fs.StringVar(&g.tlsKey, "tls-key", g.tlsKey, "client key file")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "bound on each call")
	fs.StringVar(&g.output, "o", g.output, "output format: text or json")
}

// usageError is a mistake on the command line: exit code 2. It keeps the
// error it was made of, if any (usagef's %w).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitStatus ends the program with that status and prints nothing more: the
// command printed its answer already (acl check's denial).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{
		addr:    "127.0.0.1:7070",
		timeout: 30 * time.Second,
		output:  "text",
		stdin:   stdin,
		stdout:  stdout,
		stderr:  stderr,
	}
	if v := os.Getenv("AGENTSILO_ADDR"); v != "" {
		g.addr = v
	}
	g.apiKey = os.Getenv("AGENTSILO_API_KEY")
	g.token = os.Getenv("AGENTSILO_TOKEN")

	err := dispatch(g, args)
	var (
		ue usageError
		hr helpRequest
		es exitStatus
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &hr):
		printHelp(stdout, hr.fs)
		return 0
	case errors.As(err, &es):
		return int(es)
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "error: %s\nrun 'client --help' for usage\n", ue)
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
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	if *version {
		return cmdVersion(g, "version", fs.Args())
	}
	if fs.NArg() == 0 {
		return usagef("no command")
	}
	if fs.Arg(0) == "acl" {
		return cmdACL(g, fs.Args()[1:])
	}
	c, rest := lookup(fs.Args())
	if c == nil {
		return usagef("unknown command %q", fs.Arg(0))
	}
	return c.run(g, c.name, rest)
}

func newFlagSet(name string, g *globals) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.register(fs)
	return fs
}

// flagError turns an error of fs.Parse into a help request or a usage
// error.
func flagError(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return helpRequest{fs}
	}
	return usagef("%w", err)
}

// parse parses args with fs, allowing flags after positional arguments, and
// returns the positional ones. Everything after "--" is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(fs, err)
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

// checkOutput checks the -o flag.
func (g *globals) checkOutput() error {
	if g.output != "text" && g.output != "json" {
		return usagef("-o %q: want text or json", g.output)
	}
	return nil
}

// dial checks the global flags and opens a session.
func (g *globals) dial(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	if err := g.checkOutput(); err != nil {
		return nil, err
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
	if g.token != "" {
		opts = append(opts, client.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: g.token})))
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
			return nil, usagef("--tls-ca: %w", err)
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
			return nil, usagef("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// printPush writes a pushed message: `<from> [<type>]: <text>` (its JSON
// data if it has no text), or JSON.
func (g *globals) printPush(w io.Writer, m *client.Message) {
	if g.output == "json" {
		g.printMessage(w, m)
		return
	}
	if m.MessageType != "" {
		fmt.Fprintf(w, "%s [%s]: %s\n", m.From, m.MessageType, shownText(m))
	} else {
		fmt.Fprintf(w, "%s: %s\n", m.From, shownText(m))
	}
}

// shownText is what a line about m shows of it: its text, or its JSON data
// if it has no text.
func shownText(m *client.Message) string {
	if m.Message == "" && jsonData(m) {
		return string(bytes.TrimSpace(m.Data))
	}
	return m.Message
}

// jsonType is the data type of JSON data: a typed skill's arguments and
// reply.
const jsonType = "application/json"

// jsonData reports whether m's data is JSON: of type application/json (or
// a +json type), and valid.
func jsonData(m *client.Message) bool {
	t, _, _ := strings.Cut(m.DataType, ";")
	t = strings.TrimSpace(t)
	return len(m.Data) > 0 && (t == jsonType || strings.HasSuffix(t, "+json")) && json.Valid(m.Data)
}

// printReply writes the reply of an Ask. In text: its text; its data if
// JSON (a typed skill's reply), or the data's bytes as they are if the
// reply has no text; with neither text nor data, its state, one k=v a
// line in key order (what a background A2A call answers: the task's id
// and state), else an empty line. -o json: the whole message, JSON data
// as JSON.
func (g *globals) printReply(r *client.Message) {
	if g.output == "json" {
		g.printMessage(g.stdout, r)
		return
	}
	switch {
	case jsonData(r):
		if r.Message != "" {
			fmt.Fprintln(g.stdout, r.Message)
		}
		fmt.Fprintf(g.stdout, "%s\n", bytes.TrimSpace(r.Data))
	case len(r.Data) > 0 && r.Message == "":
		g.stdout.Write(r.Data)
	case len(r.Data) > 0:
		fmt.Fprintln(g.stdout, r.Message)
		fmt.Fprintf(g.stderr, "the reply also carries %d bytes of data (%s): -o json shows them\n", len(r.Data), cmp.Or(r.DataType, "no data type"))
	case r.Message == "" && len(r.State) > 0:
		for _, k := range slices.Sorted(maps.Keys(r.State)) {
			fmt.Fprintf(g.stdout, "%s=%s\n", k, r.State[k])
		}
	default:
		fmt.Fprintln(g.stdout, r.Message)
	}
}

// printMessage writes m as JSON, as protojson does, but with JSON data
// (jsonData) as the JSON value itself instead of its bytes in base64.
func (g *globals) printMessage(w io.Writer, m *client.Message) {
	if !jsonData(m) {
		g.printJSON(w, grain.MessageToProto(m))
		return
	}
	rest := grain.MessageToProto(m)
	rest.Data = nil
	b, err := protojson.Marshal(rest)
	if err != nil {
		fmt.Fprintf(g.stderr, "error: %v\n", err)
		return
	}
	var data bytes.Buffer
	if err := json.Compact(&data, m.Data); err != nil {
		fmt.Fprintf(g.stderr, "error: %v\n", err)
		return
	}
	obj := strings.TrimSuffix(strings.TrimRight(string(b), " \n"), "}")
	if strings.TrimSpace(obj) != "{" {
		obj += ","
	}
	fmt.Fprintf(w, "%s\"data\":%s}\n", obj, data.Bytes())
}

func (g *globals) printJSON(w io.Writer, m proto.Message) {
	g.marshalJSON(w, protojson.MarshalOptions{}, m)
}

// printList writes a listing's response as JSON with its list always
// present, `[]` when empty (and every field of each item, zero or not).
func (g *globals) printList(m proto.Message) {
	g.marshalJSON(g.stdout, protojson.MarshalOptions{EmitDefaultValues: true}, m)
}

func (g *globals) marshalJSON(w io.Writer, o protojson.MarshalOptions, m proto.Message) {
	b, err := o.Marshal(m)
	if err != nil {
		fmt.Fprintf(g.stderr, "error: %v\n", err)
		return
	}
	fmt.Fprintf(w, "%s\n", b)
}

// table writes a listing in text: "none" without rows, else the header and
// the rows, tab-separated, aligned.
func (g *globals) table(header string, rows int, row func(w io.Writer, i int)) error {
	if rows == 0 {
		_, err := fmt.Fprintln(g.stdout, "none")
		return err
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for i := range rows {
		row(tw, i)
	}
	return tw.Flush()
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// maxStdin bounds the message read from stdin: the gateway's default
// largest message.
const maxStdin = 4 << 20

// text returns the message of ask, send and event: the words of TEXT joined
// by spaces; stdin for "-", or for no TEXT when stdin is not a terminal (a
// pipe or a file), less one trailing newline. No TEXT with nothing piped
// (a terminal, /dev/null, no stdin at all) is a usage error, rather than an
// empty message.
func (g *globals) text(cmd string, words []string) (string, error) {
	switch {
	case len(words) == 1 && words[0] == "-":
	case len(words) > 0:
		return strings.Join(words, " "), nil
	case !piped(g.stdin):
		return "", usagef("%s: want AGENT TEXT (or the text on stdin: pipe it, or give - to read it)", cmd)
	}
	b, err := io.ReadAll(io.LimitReader(g.stdin, maxStdin+1))
	if err != nil {
		return "", usagef("%s: reading stdin: %w", cmd, err)
	}
	if len(b) > maxStdin {
		return "", errs.New(codes.ResourceExhausted, "the message on stdin exceeds %d bytes", maxStdin)
	}
	s := string(b)
	s = strings.TrimSuffix(s, "\n")
	s = strings.TrimSuffix(s, "\r")
	return s, nil
}

// piped reports whether r has input for us: it is not a character device
// (a terminal, /dev/null) nor a file that cannot be examined (a closed
// stdin).
func piped(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return r != nil
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice == 0
}

// dataFlags are the flags that give a message its data: --data-file (any
// bytes), --data (JSON, inline) and --data-type.
type dataFlags struct {
	file, inline string
	m            *client.Message
}

// addDataFlags registers the data flags of m on fs.
func addDataFlags(fs *flag.FlagSet, m *client.Message) *dataFlags {
	d := &dataFlags{m: m}
	fs.StringVar(&d.file, "data-file", "", "`file` whose bytes are the message's data")
	fs.StringVar(&d.inline, "data", "", "the message's data, `JSON` given inline (its type application/json unless --data-type says otherwise)")
	fs.StringVar(&m.DataType, "data-type", "", "`type` of the data (MIME type or schema name); needs --data-file or --data")
	return d
}

// load sets the message's data as the flags say, and reports whether they
// gave any.
func (d *dataFlags) load() (bool, error) {
	switch {
	case d.file != "" && d.inline != "":
		return false, usagef("--data-file and --data: give one of them")
	case d.file != "":
		b, err := os.ReadFile(d.file)
		if err != nil {
			return false, usagef("--data-file: %w", err)
		}
		d.m.Data = b
	case d.inline != "":
		if !json.Valid([]byte(d.inline)) {
			return false, usagef("--data %q: not JSON (data of another kind goes in --data-file)", protocol.Clip(d.inline))
		}
		d.m.Data = []byte(d.inline)
		if d.m.DataType == "" {
			d.m.DataType = jsonType
		}
	case d.m.DataType != "":
		return false, usagef("--data-type needs --data-file or --data")
	default:
		return false, nil
	}
	return true, nil
}

// messageText is the text of ask, send, event and publish: as text says,
// except that a message with data needs no text (no TEXT is an empty
// one, and stdin is read only for "-").
func (g *globals) messageText(cmd string, words []string, withData bool) (string, error) {
	if withData && len(words) == 0 {
		return "", nil
	}
	return g.text(cmd, words)
}

// cmdMessage runs ask, send and event.
func cmdMessage(g *globals, cmd string, args []string) error {
	fs := newFlagSet(cmd, g)
	m := &client.Message{State: map[string]string{}}
	fs.StringVar(&m.MessageType, "type", "", "the message's `type`")
	fs.StringVar(&m.Channel, "channel", "", "the message's `channel`")
	data := addDataFlags(fs, m)
	fs.Var(pairs(m.State), "state", "state entry `k=v` (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("%s: want AGENT TEXT", cmd)
	}
	to := pos[0]
	withData, err := data.load()
	if err != nil {
		return err
	}
	if m.Message, err = g.messageText(cmd, pos[1:], withData); err != nil {
		return err
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
	g.printReply(r)
	return nil
}

func cmdListen(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
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

func cmdCreate(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	cfg := map[string]string{}
	fs.Var(pairs(cfg), "config", "configuration entry `k=v` (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("create: want AGENT")
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		addr, err := c.Agents().Create(ctx, pos[0], cfg)
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

func cmdAgents(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	typ := fs.String("type", "", "list only agents of this `type`")
	owner := fs.String("owner", "", "list only agents of this `owner`")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		agents, err := c.Agents().List(ctx, *owner, *typ)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printList(&agentsilov1.ListAgentsResponse{Agents: wireAgents(agents)})
			return nil
		}
		return g.table("ADDRESS\tSILO\tMAILBOX\tACTIVATED\tLAST ACTIVE", len(agents), func(w io.Writer, i int) {
			a := agents[i]
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", a.Address, a.Silo, a.MailboxDepth,
				a.ActivatedAt.Local().Format(time.DateTime), a.LastActive.Local().Format(time.DateTime))
		})
	})
}

func cmdMembers(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		members, err := c.Admin().Members(ctx)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printList(&agentsilov1.ListMembersResponse{Members: wireMembers(members)})
			return nil
		}
		return g.table("NAME\tSTATE\tGATEWAY\tPEER\tACTIVATIONS", len(members), func(w io.Writer, i int) {
			m := members[i]
			name := m.Name
			if m.Self {
				name += " (self)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", name, m.State, m.GatewayAddr, m.PeerAddr, m.Activations)
		})
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

func cmdReminders(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("reminders: want one AGENT")
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		rs, err := c.Agents().Reminders(ctx, pos[0])
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printList(&agentsilov1.ListRemindersResponse{Reminders: wireReminders(rs)})
			return nil
		}
		return g.table("NAME\tPERIOD\tNEXT\tTYPE\tMESSAGE", len(rs), func(w io.Writer, i int) {
			r := rs[i]
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Period, r.Due.Local().Format(time.DateTime), r.MessageType, r.Message)
		})
	})
}
