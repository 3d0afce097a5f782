package tests

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestErrorsSayWhetherTheyRan walks every place in the packages on a
// call's path (the SDK, the gateway, the runtime, the silo, the peer
// transport, the state stores) that makes an error with a code that does
// not say by itself whether the call ran: Unavailable, DeadlineExceeded,
// Canceled, ResourceExhausted, Aborted, Internal, Unknown, or a code
// computed at run time. Each must say it in its words (one of
// ranPhrases, the words docs/errors.md tells callers to look for), or be
// listed in quietErrors with the reason a caller never sees it without
// such words. A new site that says neither fails the test, as does a
// listed one that is gone.
func TestErrorsSayWhetherTheyRan(t *testing.T) {
	dirs := []string{"client", "internal/gateway", "grain", "cluster", "internal/transport", "internal/siloapi", "state", "internal/etcderr"}
	found := make(map[quietError]int)
	n := 0
	for _, dir := range dirs {
		for _, s := range errorSites(t, filepath.Join("..", dir)) {
			n++
			if saysWhetherItRan(s.format) {
				continue
			}
			k := quietError{s.where, s.format}
			found[k]++
			if _, ok := quietErrors[k]; !ok {
				t.Errorf("%s: %s(codes.%s, %s) does not say whether the call ran (say it, with one of %q, or list it in quietErrors with the reason no caller sees it as it is)", s.pos, s.fn, s.code, s.format, ranPhrases)
			}
		}
	}
	for k, why := range quietErrors {
		if strings.TrimSpace(why) == "" || strings.Contains(why, "TODO") {
			t.Errorf("quietErrors lists %s %s without a reason", k.where, k.format)
		}
		if found[k] == 0 {
			t.Errorf("quietErrors lists %s %s, which is no longer made (or now says whether it ran): remove it", k.where, k.format)
		}
	}
	if n < 100 {
		t.Fatalf("found %d error sites: the walk is wrong", n)
	}
	t.Logf("%d error sites with codes that need words; %d listed as never reaching a caller as they are", n, len(quietErrors))
}

// ranPhrases are the words that say whether a call ran (see
// docs/errors.md: "did not run", "may have run", "ran and failed").
var ranPhrases = []string{
	"did not run", "not run", "not sent", "not delivered", "before it ran",
	"may have run", "may have landed",
	"the turn ran", " ran, but", "ran and failed", "already ran", "state change landed",
}

func saysWhetherItRan(format string) bool {
	for _, p := range ranPhrases {
		if strings.Contains(format, p) {
			return true
		}
	}
	return false
}

// quietError names an error site: its file and function, and its format.
type quietError struct{ where, format string }

// Why listed errors are never seen by a caller as they are.
const (
	notACall = "not the error of a call to an agent: the cluster's own work (membership, peer streams, client sessions, listings, administration), which changes nothing when it fails"
	toAgent  = "returned to an agent's own code (its state, reminders, topics, service directory); a caller sees it only as the agent's error, which the runtime words as a turn that ran and failed"
	viaWire  = "the words of the silo or gateway that answered, which say whether it ran (and the result's not-run flag marks a refusal)"
)

// quietErrors are the error sites that need not say whether the call ran,
// each with why.
var quietErrors = map[quietError]string{
	// The SDK.
	{"client/client.go:Client.callOnce", `"%s"`}:                             viaWire,
	{"client/client.go:wrap", `"stream closed"`}:                             notACall + " (the administration and listing calls)",
	{"client/client.go:wrap", `"%s: %s"`}:                                    notACall + " (the administration and listing calls)",
	{"client/client.go:callCtxErr", `"call %s: cancelled %s"`}:               "its last words say it: before it was sent, so it did not run, or after: it may have run",
	{"client/client.go:callCtxErr", `"call %s: deadline exceeded %s"`}:       "its last words say it: before it was sent, so it did not run, or after: it may have run",
	{"client/client.go:ctxErr", `"%s: cancelled"`}:                           "waiting for a gateway: a call's callOnce words it as not sent, so it did not run",
	{"client/client.go:ctxErr", `"%s: deadline exceeded"`}:                   "waiting for a gateway: a call's callOnce words it as not sent, so it did not run",
	{"client/session.go:Client.open", `"gateway %s answered Hello with %T"`}: "opening a session: a call's callOnce words it as not sent, so it did not run",
	{"client/session.go:Client.stream", `"client is closed"`}:                "opening a session: a call's callOnce words it as not sent, so it did not run",

	// The gateway.
	{"internal/gateway/agents.go:Gateway.configs", `"agent configurations are not kept on silo %s"`}:                                     notACall,
	{"internal/gateway/agents.go:Gateway.UnregisterReminder", `"reminders are not configured on silo %s"`}:                               notACall,
	{"internal/gateway/reminders.go:Gateway.ListReminders", `"reminders are not configured on silo %s"`}:                                 notACall,
	{"internal/gateway/topics.go:topicServer.svc", `"topics are not configured on silo %s"`}:                                             notACall + " (publishing reaches no agent before the topic's store)",
	{"internal/gateway/topics.go:topicServer.Broadcast", `"broadcast is not configured on silo %s"`}:                                     notACall,
	{"internal/gateway/gateway.go:Gateway.checkDraining", `"gateway %s is shutting down"`}:                                               "ends a session stream; the calls it had not started are marked not run (the drained trailer) and the SDK sends them again",
	{"internal/gateway/session.go:Gateway.recvHello", `"gateway %s is stopping"`}:                                                        notACall + " (opening a session)",
	{"internal/gateway/session.go:Gateway.recvHello", `"no Hello within %v of opening the session stream"`}:                              notACall + " (opening a session)",
	{"internal/gateway/sessions.go:Sessions.makeRoomLocked", `"principal %s holds %d attached sessions (the gateway's limit)"`}:          notACall + " (opening a session)",
	{"internal/gateway/sessions.go:Sessions.open", `"resume token: %w"`}:                                                                 notACall + " (opening a session)",
	{"internal/gateway/sessions.go:Sessions.adopt", `"resume %s: another stream is resuming it on this gateway"`}:                        notACall + " (opening a session)",
	{"internal/gateway/stream.go:Gateway.readFrames", `"gateway %s is stopping"`}:                                                        notACall + " (ends a session stream; its calls are answered as the drain says)",
	{"internal/gateway/stream.go:sessionStream.serve", `"session %s: the client has read no result for %v while %d calls were pending"`}: notACall + " (ends a session stream that reads nothing; the calls' results were written to it)",
	{"internal/gateway/sessions.go:Sessions.DeliverToSession", `"client session %s has %d messages it has not received yet"`}:            toAgent + " (a push to a client session)",
	{"internal/gateway/sessions.go:Sessions.DeliverToSession", `"client session %s has %d bytes of messages it has not received yet"`}:   toAgent + " (a push to a client session)",

	// The peer transport.
	{"internal/transport/inbound.go:server.Stream", `"silo %s: transport closed"`}:                                  notACall + " (ends a peer stream)",
	{"internal/transport/inbound.go:Transport.recvHello", `"silo %s: no hello within %v of opening a peer stream"`}: notACall + " (opening a peer stream)",
	{"internal/transport/inbound.go:Transport.recvHello", `"silo %s: transport closed"`}:                            notACall + " (opening a peer stream)",
	{"internal/transport/peer.go:peer.register", `"peer %s left the view"`}:                                         "wrapped as not delivered, which says it",
	{"internal/transport/peer.go:peer.run", `"peer %s: stream down: %s"`}:                                           "a pending call gets it wrapped as not delivered, or with \"the request may have run\"",
	{"internal/transport/peer.go:peer.connectAndServe", `"connect timed out"`}:                                      "the cause of a stream down (above)",
	{"internal/transport/peer.go:peer.connectAndServe", `"peer sent no hello"`}:                                     "the cause of a stream down (above)",
	{"internal/transport/peer.go:peer.deliver", `"%s"`}:                                                             viaWire + " (wrapped as not delivered when marked not run)",
	{"internal/transport/transport.go:askCtxErr", `"ask peer %s: cancelled %s"`}:                                    "its last words say it: before it was sent (it did not run), or after: it may have run",
	{"internal/transport/transport.go:askCtxErr", `"ask peer %s: deadline exceeded %s"`}:                            "its last words say it: before it was sent (it did not run), or after: it may have run",
	{"internal/transport/transport.go:errTransportClosed", `"transport closed"`}:                                    "a queued call gets it wrapped as not sent, so it did not run; a pending one as a stream down",
	{"internal/transport/transport.go:ctxErr", `"%s: cancelled"`}:                                                   "its callers' words say it (not sent, so it did not run)",
	{"internal/transport/transport.go:ctxErr", `"%s: deadline exceeded"`}:                                           "its callers' words say it (not sent, so it did not run)",

	// The silo.
	{"cluster/declared.go:declaredTypes.waitApplied", `"declared types: revision %d not applied (at %d)"`}:                    notACall,
	{"cluster/declared.go:storedDefinition", `"encode the definition of %s"`}:                                                 notACall,
	{"cluster/info.go:clusterInfo.askSome", `"silo %s: %w"`}:                                                                  notACall + " (listings)",
	{"cluster/info.go:clusterInfo.Deactivate", `"deactivate %s: its silo %s is not in the view"`}:                             notACall,
	{"cluster/peer.go:peerHandler.release", `"release %s: view %d not reached: %w"`}:                                          notACall + " (a handover between silos)",
	{"cluster/peer.go:peerHandler.agents", `"agents: %w"`}:                                                                    notACall + " (listings)",
	{"cluster/peer.go:peerHandler.types", `"types: %w"`}:                                                                      notACall + " (listings)",
	{"cluster/router.go:router.Claim", `"silo %s is suspended (etcd not answering) and did not serve again in time"`}:         "the runtime marks a refused claim not run, and the caller words it so",
	{"cluster/router.go:router.Claim", `"silo %s is fenced"`}:                                                                 "the runtime marks a refused claim not run, and the caller words it so",
	{"cluster/router.go:router.Claim", `"silo %s is not serving activations"`}:                                                "the runtime marks a refused claim not run, and the caller words it so",
	{"cluster/router.go:router.handover", `"%s: silo %s did not release it: %w"`}:                                             "a refused claim (above)",
	{"cluster/sessions.go:sessionRouter.ask", `"client session %s: silo %s is not in the cluster"`}:                           toAgent + " (a push to a client session)",
	{"cluster/sessions.go:sessionRouter.receive", `"client session %s: its fallback holder is %s, not %s"`}:                   toAgent + " (a push to a client session)",
	{"cluster/sessions.go:sessionKeeper.deliver", `"client session %s is detached with %d messages kept for it (the limit)"`}: toAgent + " (a push to a client session)",
	{"cluster/sessions.go:sessionKeeper.deliver", `"client session %s is detached with %d bytes of messages kept for it"`}:    toAgent + " (a push to a client session)",
	{"cluster/sessions.go:sessionKeeper.handTo", `"client session %s: silo %s is not in the cluster"`}:                        notACall + " (a session's handover)",
	{"cluster/sessions.go:sessionKeeper.register", `"register %s: silo %s is not in the view"`}:                               notACall + " (opening a session)",
	{"cluster/sessions.go:sessionKeeper.register", `"silo %s keeps %d client sessions (its limit)"`}:                          notACall + " (opening a session)",
	{"cluster/sessions.go:sessionKeeper.adopt", `"adopt %s: silo %s is not in the view"`}:                                     notACall + " (a session's handover)",
	{"cluster/sessions.go:sessionKeeper.adopt", `"resume %s: silo %s did not give the session up yet: %w"`}:                   notACall + " (a session's handover)",
	{"cluster/sessions.go:sessionKeeper.adopt", `"resume %s: handing its messages over broke off: %w"`}:                       notACall + " (a session's handover)",
	{"cluster/sessions.go:sessionKeeper.release", `"silo %s is not in the view"`}:                                             notACall + " (a session's handover)",
	{"cluster/sessions.go:sessionKeeper.released", `"handing %s over to %s: %w"`}:                                             notACall + " (a session's handover)",
	{"cluster/sessions.go:sessionHome.ask", `"silo %s is not in the view"`}:                                                   notACall + " (a session's handover)",
	{"cluster/topics.go:clusterInfo.broadcastPeers", `"broadcast: %w"`}:                                                       notACall + " (a broadcast, whose count of reached agents is the answer)",

	// The state stores: their errors go to the agent that loads or saves.
	{"state/etcd.go:Etcd.save", `"%s: %d bytes is over the etcd state store's limit of 1 MiB (%d bytes); keep larger state in the PostgreSQL store"`}: toAgent,
	{"state/postgres.go:pgFail", `"%s: postgres"`}:                                                                                        toAgent,
	{"state/postgres.go:pgFail", `"%s: postgres unavailable"`}:                                                                            toAgent,
	{"state/store.go:conflict", `"%s: it already exists (etag \"\" says it must not): load it first"`}:                                    toAgent,
	{"state/store.go:conflict", `"%s: etag %s names no state: there is none (deleted, or never saved); load it again"`}:                   toAgent,
	{"state/store.go:conflict", `"%s: etag %s was never issued for it (its etag is %d); load it again"`}:                                  toAgent,
	{"state/store.go:conflict", `"%s: etag %s is stale: another write came first; load it again"`}:                                        toAgent,
	{"state/store.go:conflict", `"%s: etag %s is not its current one (another write came first, or it was never issued); load it again"`}: toAgent,
	{"state/store.go:callerError", `"%s: %w"`}:                                                                                            toAgent,
	{"internal/etcderr/etcderr.go:Wrap", `"%s"`}:                                                                                          toAgent + " (and the silo's own etcd work)",
	{"internal/etcderr/etcderr.go:FromCall", `"%s"`}:                                                                                      toAgent + " (and the silo's own etcd work)",

	// The runtime.
	{"grain/activation.go:activation.invoke", `"agent %s panicked: %v"`}: "an agent's own failure: it ran and failed (docs/errors.md)",
	{"grain/idempotency.go:activation.saveKeyed", `"the state of %s: a change under an idempotency key was refused at etag %s as applied already, so the value at hand is not the stored one; load it again"`}: toAgent,
	{"grain/reminder.go:activation.RegisterReminder", `"reminders are not configured on this silo"`}:                                                                                                           toAgent,
	{"grain/reminder.go:activation.UnregisterReminder", `"reminders are not configured on this silo"`}:                                                                                                         toAgent,
	{"grain/reminder.go:activation.Reminders", `"reminders are not configured on this silo"`}:                                                                                                                  toAgent,
	{"grain/placement.go:Runtime.waitEnded", `"deactivate %s: waiting for it to end"`}:                                                                                                                         notACall + " (a deactivation the silo asked for)",
	{"grain/runtime.go:Runtime.sweepNow", `"runtime closed"`}:                                                                                                                                                  notACall + " (the idle sweep)",
	{"grain/servicedirectory.go:actDirectory.service", `"no service directory on silo %s"`}:                                                                                                                    toAgent,
	{"grain/state.go:activation.resolve", `"the state of %s: an earlier write whose outcome was unknown did not land, so the value at hand may hold a change that was not stored; load it again"`}:             toAgent,
	{"grain/state.go:activation.resolve", `"the state of %s changed while the outcome of an earlier write was unknown: etag %q is stale; load it again"`}:                                                      toAgent,
	{"grain/state.go:LoadJSON", `"the state of %s does not decode into %T: %w"`}:                                                                                                                               toAgent,
	{"grain/state.go:MemoryStateStore.checkLocked", `"%s: it already exists (etag \"\" says it must not)"`}:                                                                                                    toAgent,
	{"grain/state.go:MemoryStateStore.checkLocked", `"%s: etag %q is stale"`}:                                                                                                                                  toAgent,
	{"grain/topics.go:activation.Publish", `"topics are not configured on this silo"`}:                                                                                                                         toAgent,
	{"grain/topics.go:activation.Subscribe", `"topics are not configured on this silo"`}:                                                                                                                       toAgent,
	{"grain/topics.go:activation.Unsubscribe", `"topics are not configured on this silo"`}:                                                                                                                     toAgent,
}

// errorSite is a call of errs.New or errs.Wrap.
type errorSite struct {
	pos      token.Position
	where    string // file (from the module's root) and function
	fn, code string
	format   string // the format's literal, quoted as in the source; "?" if not a literal
}

// quietCodes are the codes whose errors must say whether the call ran.
var quietCodes = []string{"Unavailable", "DeadlineExceeded", "Canceled", "ResourceExhausted", "Aborted", "Internal", "Unknown"}

// errorSites returns the errs.New and errs.Wrap calls of the package in
// dir (tests aside) whose code is one of quietCodes or not a constant.
func errorSites(t *testing.T, dir string) []errorSite {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var sites []errorSite
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, ".."+string(filepath.Separator)))
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			where := rel + ":" + funcName(fd)
			ast.Inspect(fd, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) < 2 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "errs" || (sel.Sel.Name != "New" && sel.Sel.Name != "Wrap") {
					return true
				}
				code := "(computed)"
				if c, ok := call.Args[0].(*ast.SelectorExpr); ok {
					if x, ok := c.X.(*ast.Ident); ok && x.Name == "codes" {
						code = c.Sel.Name
						if !slices.Contains(quietCodes, code) {
							return true
						}
					}
				}
				fi := 1
				if sel.Sel.Name == "Wrap" {
					fi = 2
				}
				format := "?"
				if fi < len(call.Args) {
					if lit, ok := call.Args[fi].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						format = lit.Value
						if s, err := strconv.Unquote(lit.Value); err == nil {
							format = strconv.Quote(s)
							if strings.HasPrefix(lit.Value, "`") {
								format = "`" + s + "`"
							}
						}
					}
				}
				sites = append(sites, errorSite{pos: fset.Position(call.Pos()), where: where, fn: "errs." + sel.Sel.Name, code: code, format: format})
				return true
			})
		}
	}
	return sites
}

// funcName is fd's name, with its receiver's type for a method (T.M).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok {
		typ = ix.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fmt.Sprintf("%T.%s", typ, fd.Name.Name)
}
