package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// A cmdSpec is one command of the CLI: what `client help NAME` and `client
// NAME --help` print about it, and how it runs. Its flags are those its run
// function registers on the flag set it parses with (newFlagSet(name)).
type cmdSpec struct {
	name    string // "ask", "acl check"
	args    string // what follows the name in a synopsis: "AGENT [TEXT...|-]"
	summary string // one line, for the list of commands
	doc     string // the rest of its help: what it does, what it prints
	run     func(g *globals, name string, args []string) error
}

// commands are the CLI's commands, in the order of the usage (set by init:
// the run functions refer to it through the help).
var commands []*cmdSpec

func init() {
	msg := func(what string) string {
		return what + `

AGENT is Type:owner:alias, or Type:alias for one of your own. TEXT is
the message, its words joined by spaces; "-" reads it from stdin, and so
does no TEXT when stdin is not a terminal (a pipe or a file; one trailing
newline is dropped). No TEXT with nothing piped is a usage error. A text
that is not UTF-8 is InvalidArgument (exit 2): bytes go in --data-file.
--data gives the message's data as JSON inline (a typed skill's
arguments, with --type naming the skill); a message with data needs no
TEXT.`
	}
	commands = []*cmdSpec{
		{"ask", "AGENT [TEXT...|-]", "send a request; print the reply",
			msg(`Prints the reply's text, and its data if it is JSON (a typed skill's
reply); data of another kind is written as it is when the reply has no
text. A reply with neither prints its state, k=v a line (a background A2A
call's: the task's id and state). -o json prints the whole reply, JSON
data as JSON. Messages the agent pushes to this session meanwhile go to
stderr.`), cmdMessage},
		{"send", "AGENT [TEXT...|-]", "send a one-way message",
			msg(`Returns once the agent's mailbox has taken it; prints nothing.`), cmdMessage},
		{"event", "AGENT [TEXT...|-]", "send an event",
			msg(`The agent handles it with OnEvent; prints nothing.`), cmdMessage},
		{"listen", "", "print the messages pushed to this session until interrupted",
			`Prints the session's address on stderr, then every message agents push
to it on stdout, until SIGINT or SIGTERM.`, cmdListen},
		{"create", "AGENT", "store an agent's configuration",
			`Stores the configuration (--config, repeatable) that the agent's
activations read; prints the agent's canonical address.`, cmdCreate},
		{"agents", "", "list the active agents",
			`Lists the agents active in the cluster that you may read (--owner,
--type filter them); an operator (one who may administer the ACL: Admin
on system:acl, or group admins) sees every one. "none" if there are none
(-o json: an empty list).`, cmdAgents},
		{"types", "", "list the agent types the cluster hosts",
			`Lists the agent types of every silo with their descriptions and skills,
a type declared without code (types apply) marked "(declared)"; --skill
TAG keeps those with a skill carrying the tag.`, cmdTypes},
		{"members", "", "list the silos of the cluster",
			`Lists the silos as the gateway sees them.`, cmdMembers},
		{"reminders remove", "AGENT NAME", "unregister one of an agent's reminders",
			`Removes the reminder NAME of AGENT (needs Configure on it); NotFound
(exit 3) if it has none of that name.`, cmdReminderRemove},
		{"config delete", "AGENT", "delete an agent's stored configuration",
			`Removes what create stored for AGENT (needs Configure on it).`, cmdConfigDelete},
		{"config", "AGENT", "show an agent's stored configuration",
			`Prints the configuration create stored for AGENT, one k=v a line
(needs Read on it); "none" if nothing was stored.`, cmdConfig},
		{"state delete", "AGENT", "delete an agent's stored state",
			`Removes AGENT's state (needs Configure on it); with --etag, only if
the stored state is still that version (else Aborted, exit 1).`, cmdStateDelete},
		{"state", "AGENT", "show an agent's stored state and etag",
			`Prints AGENT's etag on stderr and its state on stdout (needs Read on
it); "none" if it has none. -o json prints both, the data base64.`, cmdState},
		{"conversation delete", "AGENT", "delete a model agent's conversation",
			`Deletes the conversation AGENT recorded (its forget skill; its owner, or
a principal the ACL grants Configure on it, may), with the answers it kept
by idempotency key. A turn in progress, or waiting for approvals, is
FailedPrecondition (exit 1): nothing is deleted.`, cmdConversationDelete},
		{"conversations delete", "--owner OWNER", "delete every conversation of an owner",
			`Deletes the recorded conversation of every model agent of OWNER (as
conversation delete does, one by one), and prints how many. It goes on past
one it cannot delete, and exits with the first such error.`, cmdConversationsDelete},
		{"conversations", "--owner OWNER", "list an owner's model agents with a conversation",
			`Lists the model agents of OWNER (of every type with the conversation and
forget skills) that have a recorded conversation, active or not, one
address a line; "none" if there is none (-o json: a list).`, cmdConversations},
		{"conversation", "AGENT", "show a model agent's conversation",
			`Prints the conversation a model agent recorded (its conversation skill;
needs Message on it), turn by turn: the user's message, the model's
answers and tool calls, the tools' results (cut at 300 characters; --full
prints them whole), and each turn's model calls and tokens, with the
totals last. The turn in progress is marked running, and its tool calls
still without a result (running). It answers while the agent is in a
turn. "none" if the agent has recorded nothing. -o json prints the record
as the skill returns it (llm.Conversation's JSON). An agent whose type has
no conversation skill is InvalidArgument (exit 2).`, cmdConversation},
		{"approvals approve", "ID", "approve a tool call that waits for approval",
			`Approves the model agent's tool call ID (as approvals lists it; the
agent's owner, or a principal the ACL grants Approve on it, may): the call
runs and the agent's turn goes on. --args JSON runs it with these
arguments instead of the model's, checked against the tool's schema
(InvalidArgument, exit 2, if they do not match; nothing is decided). An ID
that waits nowhere is NotFound (exit 3); one decided already,
FailedPrecondition (exit 1); a principal not allowed, PermissionDenied
(exit 4).`, cmdApprove},
		{"approvals deny", "ID", "deny a tool call that waits for approval",
			`Denies the model agent's tool call ID (who may: as approvals approve): the
model gets the denial, with --reason TEXT, as the call's result, and the
turn goes on. Errors as for approvals approve.`, cmdDeny},
		{"approvals", "AGENT", "list a model agent's tool calls that wait for approval",
			`Lists the tool calls AGENT's turn waits to have approved: the approval
ID, the tool and its arguments, and the deadline (past it, the call is
denied, or approved if the definition says so). "none" if nothing waits
(-o json: an empty list).`, cmdApprovals},
		{"audit verify", "", "check the audit log's hash chains",
			`Checks every partition of the audit log: each record follows the one
before it, names its hash, and hashes to its own; prints "ok" with the
records and partitions checked, or names the first record that does not
match (partition/seq, its key, and why) and exits 1. Needs Audit on
system:audit (PermissionDenied, exit 4); a silo with the audit off is
FailedPrecondition (exit 1). -o json prints the report.`, cmdAuditVerify},
		{"audit", "", "list the audit log's records",
			`Lists the records of side-effecting actions, oldest first, one a line:
time, kind, the on-behalf-of chain (principal first, joined by >), agent
and skill or tool, outcome (and the approval decision), tokens, and the
record's partition/seq. --agent, --principal, --kind, --since (an RFC 3339
time or a duration back from now, 24h) filter them; --limit keeps the
most recent (at most 1000). "none" if there are none. -o json prints them
as a JSON list; --export jsonl as JSON lines, --export otlp as one
OTLP/JSON logs request (for an OpenTelemetry Collector). Needs Audit on
system:audit (PermissionDenied, exit 4).`, cmdAudit},
		{"deactivate", "AGENT", "end an agent's activation",
			`Ends AGENT's activation after its current turn, wherever it lives
(needs Configure on it); its next message activates it again. An agent
that is not active is left alone.`, cmdDeactivate},
		{"reminders", "AGENT", "list an agent's durable reminders",
			`Lists the agent's reminders; "none" if it has none (-o json: an empty
list).`, cmdReminders},
		{"publish", "TOPIC [TEXT...|-]", "publish a message to a topic",
			`Publishes to TOPIC (owner:name, or a name of yours such as
orders.created) and prints the message's id once it is durable, with the
number of subscriptions it was queued for. --key makes a publish again with
the same key (within 10 minutes) a no-op. Publishing to another owner's
topic needs Message on it. TEXT as for ask.`, cmdPublish},
		{"subscribe", "PATTERN | AGENT NAME PATTERN", "subscribe this session, or an agent, to topics",
			`With PATTERN alone: subscribes this client's session to PATTERN and
prints each message published to its topics (TOPIC FROM: TEXT; -o json:
the message) until interrupted; the subscription ends with the session.
A message is acknowledged once it is in the session's backlog;
--max-attempts is for an agent's subscription.

With AGENT NAME PATTERN: adds AGENT to the subscription NAME of its
owner, creating it with PATTERN (owner:pattern, or a pattern of your
topics: * is one segment, # zero or more, e.g. orders.#) if it does not
exist. Agents in one subscription compete for its messages; each
subscription gets its own copy. Everything published after it returns is
delivered to the agent's OnMessage, at least once, until its handler
returns no error; after --max-attempts deliveries (default 5) the message
is a dead letter.`, cmdSubscribe},
		{"unsubscribe", "AGENT NAME", "remove an agent from a subscription",
			`Removes AGENT from its owner's subscription NAME; the last agent's
leaving deletes the subscription with its backlog and dead letters.`, cmdUnsubscribe},
		{"subscriptions", "", "list subscriptions",
			`Lists your subscriptions (--owner: another owner's you may read), with
their patterns, attempts and agents; "none" if there are none.`, cmdSubscriptions},
		{"deadletters replay", "SUBSCRIPTION (ID...|--all)", "deliver dead letters again",
			`Queues the dead letters ID... (or --all) of SUBSCRIPTION (owner:name, or
a name of yours) again, at the end of its queue, their attempts from 1
(needs Configure on it).`, cmdDeadLetterAction},
		{"deadletters drop", "SUBSCRIPTION (ID...|--all)", "delete dead letters",
			`Deletes the dead letters ID... (or --all) of SUBSCRIPTION (needs
Configure on it).`, cmdDeadLetterAction},
		{"deadletters", "SUBSCRIPTION", "list a subscription's dead letters",
			`Lists the dead letters of SUBSCRIPTION (owner:name, or a name of
yours), oldest first: id, topic, attempts, when, the reason (poison: ...,
or attempts exhausted), the last error and the message. At most --limit;
when there are more, stderr says the --after that lists them.`, cmdDeadLetters},
		{"broadcast", "PATTERN [TEXT...|-]", "send to every active agent matching a glob",
			`Sends a one-way message (--event: an event) to every active agent of
the cluster whose address matches PATTERN (a glob such as Worker:acme:*)
and prints how many it reached. Agents that are not active are not
activated.`, cmdBroadcast},
		{"acl rules", "", "list the ACL's rules in order, with their ids",
			`The first rule that matches a call decides it. While no rules are set,
prints "none" and the seed rule that applies instead.`, aclRules},
		{"acl add", "--owner P --caller P --perm LIST [--agent P] [--at N]", "add a rule",
			`Adds a rule at position N (1 is first; default last) and prints its id
and position. Patterns: *, prefix* or a name; the caller also group:NAME.
Permissions: Message, Configure, Read, Admin, Approve, All, None, or a list such as
Message,Read.`, aclPut},
		{"acl update", "ID --owner P --caller P --perm LIST [--agent P]", "replace a rule",
			`Replaces the rule with id ID (see acl rules).`, aclPut},
		{"acl remove", "ID", "remove a rule",
			`Removes the rule with id ID (see acl rules); NotFound (exit 3) if there
is none.`, aclRemove},
		{"acl groups", "", "list the groups",
			`Lists the ACL's groups and their members; "none" if there are none.`, aclGroups},
		{"acl group", "NAME [MEMBER...]", "set a group's members",
			`Sets the members of group NAME; with no MEMBER, removes the group.`, aclGroup},
		{"acl check", "--caller C --perm P [--group G]... AGENT", "explain an ACL decision",
			`Explains whether caller C holds permission P on AGENT (Type:owner:alias
or owner:alias): its own agent, the rule that matched, or default deny.
Exits 0 if allowed, 4 if denied.`, aclCheck},
		{"version", "", "print the client's version and build",
			`Prints agentsilo's module version (a tag, a pseudo-version, or (devel)
from a checkout), the VCS revision it was built from (when the build
recorded one) and the Go version, on one line as silo --version does:
client VERSION [REVISION] GOVERSION. With -o json, also the revision's
time, whether the work tree was modified, and the platform. Also
client --version.`, cmdVersion},
		{"help", "[COMMAND]", "print this usage, or a command's",
			`Prints a command's usage and flags, as COMMAND --help does.`, cmdHelp},
	}
	commands = withDirectoryCommands(commands) // directory.go
	commands = withTypeCommands(commands)      // types.go
}

// lookup returns the command named by the first words of args (`acl`
// `check`), and the rest of args; nil if there is none.
func lookup(args []string) (*cmdSpec, []string) {
	for _, c := range commands {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == c.name {
			return c, args[len(words):]
		}
	}
	return nil, args
}

// helpRequest is what a command's flag parsing returns for -h or --help:
// run prints the command's help and exits 0.
type helpRequest struct {
	fs *flag.FlagSet
}

func (helpRequest) Error() string { return "help requested" }

// usage writes the CLI's usage.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: client [global flags] COMMAND [args] [flags]")
	fmt.Fprintln(w, "\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.name+" "+shortArgs(c.args)), c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
global flags, before or after the command:
  --addr LIST          gateway addresses, comma-separated: host:port, or a host
                       alone for port 7070 ($AGENTSILO_ADDR; default 127.0.0.1:7070)
  --api-key KEY        API key ($AGENTSILO_API_KEY)
  --token TOKEN        bearer token of the cluster's OpenID provider, sent as
                       "authorization: Bearer TOKEN" ($AGENTSILO_TOKEN)
  --as PRINCIPAL       principal to declare to a development gateway (its default: dev)
  --tls-ca FILE        CA certificates to verify the gateway (enables TLS)
  --tls-cert FILE, --tls-key FILE
                       client certificate and key (enables TLS)
  --timeout D          bound on each call (default 30s)
  -o text|json         output format (default text)
  --version            print the version and exit

Run 'client help COMMAND' or 'client COMMAND --help' for a command's flags.
Exit codes: 0 ok; 2 usage or InvalidArgument; 3 NotFound; 4 Unauthenticated
or PermissionDenied (and acl check: denied); 5 DeadlineExceeded or
Unavailable; 1 anything else. Errors go to stderr as 'error: CODE: MESSAGE'.
`)
}

// shortArgs is a synopsis's positional arguments, for the list of
// commands: "--owner P [--at N] ID" gives "ID".
func shortArgs(args string) string {
	var pos []string
	words := strings.Fields(args)
	for i := 0; i < len(words); i++ {
		switch w := words[i]; {
		case strings.HasPrefix(w, "--"):
			i++ // and its value
		case strings.HasPrefix(w, "[--"):
			for i < len(words) && !strings.Contains(words[i], "]") {
				i++
			}
		default:
			pos = append(pos, w)
		}
	}
	return strings.Join(pos, " ")
}

// printHelp writes the help of the command whose flag set is fs.
func printHelp(w io.Writer, fs *flag.FlagSet) {
	c, _ := lookup(strings.Fields(fs.Name()))
	switch {
	case fs.Name() == "acl":
		aclUsage(w)
		return
	case c == nil:
		usage(w)
		return
	}
	fmt.Fprintf(w, "usage: client %s [flags]\n\n%s\n\n%s\n", strings.TrimSpace(c.name+" "+c.args), capitalize(c.summary)+".", c.doc)
	global := flag.NewFlagSet("", flag.ContinueOnError)
	new(globals).register(global)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		if global.Lookup(f.Name) != nil {
			return
		}
		if n == 0 {
			fmt.Fprintln(w, "\nflags:")
		}
		n++
		value, text := flag.UnquoteUsage(f)
		if value != "" {
			value = " " + value
		}
		if d := f.DefValue; d != "" && d != "0" && d != "0s" && d != "false" {
			text += fmt.Sprintf(" (default %s)", d)
		}
		fmt.Fprintf(tw, "  --%s%s\t%s\n", f.Name, value, text)
	})
	tw.Flush()
	fmt.Fprintln(w, "\nThe global flags work here too: see client --help.")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// cmdHelp prints the usage, or a command's help.
func cmdHelp(g *globals, name string, args []string) error {
	args, err := parse(newFlagSet(name, g), args)
	if err != nil {
		return err
	}
	switch {
	case len(args) == 0:
		usage(g.stdout)
		return nil
	case len(args) == 1 && args[0] == "acl":
		aclUsage(g.stdout)
		return nil
	}
	c, rest := lookup(args)
	if c == nil || len(rest) > 0 {
		return usagef("help: unknown command %q", strings.Join(args, " "))
	}
	return c.run(g, c.name, []string{"--help"})
}
