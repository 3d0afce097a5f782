// Package outside runs an A2A agent outside the cluster, on the official
// Go SDK's server, for the tests of long tasks and input-required turns.
// What it does is chosen by the first word of a task's first message:
//
//	slow <text>  works ("started") until Release, then completes with "done: <text>"
//	ask <n>      asks n questions ("question i of n?"), one per turn, then
//	             completes with "answers: a1; a2; ..."
//	same         asks "what is your name?" forever
//	new          asks a new question ("question i?") forever
//	<other>      completes at once with the text
//
// A Server that does not stream answers a blocking SendMessage at once
// with the task as it is (submitted), so that its caller must poll.
package outside

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/eventqueue"
)

// Server is an outside A2A agent on 127.0.0.1.
type Server struct {
	// URL is the agent's base URL; its card is at URL/.well-known/agent-card.json.
	URL string

	srv    *httptest.Server
	queues eventqueue.Manager // the tasks' event queues, destroyed by Close

	mu       sync.Mutex
	gate     chan struct{}
	tasks    map[spec.TaskID]*task
	canceled []spec.TaskID
	sends    int
	traces   []string
	auths    []string
	messages []*spec.Message
}

type task struct {
	cmd     string
	turns   int
	answers []string
}

// Start starts a Server, streaming or not, its card listing skills; Close
// stops it.
func Start(streaming bool, skills ...spec.AgentSkill) *Server {
	s := &Server{gate: make(chan struct{}), tasks: map[spec.TaskID]*task{}, queues: eventqueue.NewInMemoryManager()}
	opts := []a2asrv.RequestHandlerOption{a2asrv.WithEventQueueManager(s.queues)}
	if !streaming {
		opts = append(opts, a2asrv.WithCallInterceptors(returnAtOnce{}))
	}
	opts = append(opts, a2asrv.WithCallInterceptors(counter{s}))
	h := a2asrv.NewHandler(&executor{s: s}, opts...)
	mux := http.NewServeMux()
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("traceparent"); tp != "" {
			s.mu.Lock()
			s.traces = append(s.traces, tp)
			s.mu.Unlock()
		}
		if a := r.Header.Get("Authorization"); a != "" {
			s.mu.Lock()
			s.auths = append(s.auths, a)
			s.mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	}))
	s.URL = "http://" + s.srv.Listener.Addr().String()
	card := &spec.AgentCard{
		Name: "outside", Description: "an outside A2A agent for tests", Version: "1.0.0",
		SupportedInterfaces: []*spec.AgentInterface{spec.NewAgentInterface(s.URL+"/rpc", spec.TransportProtocolJSONRPC)},
		Capabilities:        spec.AgentCapabilities{Streaming: streaming},
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: skills,
	}
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(h))
	s.srv.Start()
	return s
}

// Close stops the server and the tasks still running, and destroys the
// tasks' event queues (each has a goroutine, which the SDK ends only when
// a task's execution does).
func (s *Server) Close() {
	s.Release()
	s.srv.CloseClientConnections()
	s.srv.Close()
	s.mu.Lock()
	ids := make([]spec.TaskID, 0, len(s.tasks)+len(s.canceled))
	for id := range s.tasks {
		ids = append(ids, id)
	}
	ids = append(ids, s.canceled...)
	s.mu.Unlock()
	for _, id := range ids {
		_ = s.queues.Destroy(context.Background(), id)
	}
}

// CardURL is the agent card's URL.
func (s *Server) CardURL() string { return s.URL + a2asrv.WellKnownAgentCardPath }

// Release lets every slow task complete.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.gate:
	default:
		close(s.gate)
	}
}

// Canceled returns the ids of the tasks cancelled so far.
func (s *Server) Canceled() []spec.TaskID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]spec.TaskID(nil), s.canceled...)
}

// Turns returns how many turns (messages) task id has had.
func (s *Server) Turns(id spec.TaskID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tasks[id]; t != nil {
		return t.turns
	}
	return 0
}

// Traceparents returns the W3C traceparent headers of the requests
// received so far.
func (s *Server) Traceparents() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.traces...)
}

// Authorizations returns the Authorization headers of the requests it
// got, in order.
func (s *Server) Authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auths...)
}

// Messages returns the messages its tasks' turns got so far, in order
// (with their ids and metadata).
func (s *Server) Messages() []*spec.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*spec.Message(nil), s.messages...)
}

// Sends counts the SendMessage and SendStreamingMessage calls received.
func (s *Server) Sends() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sends
}

type executor struct{ s *Server }

func (e *executor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	return func(yield func(spec.Event, error) bool) {
		text := ""
		if ec.Message != nil {
			for _, p := range ec.Message.Parts {
				text += p.Text()
			}
		}
		s := e.s
		s.mu.Lock()
		if ec.Message != nil {
			s.messages = append(s.messages, ec.Message)
		}
		t := s.tasks[ec.TaskID]
		if t == nil {
			t = &task{cmd: text}
			s.tasks[ec.TaskID] = t
		} else {
			t.answers = append(t.answers, text)
		}
		t.turns++
		turn, cmd, answers := t.turns, t.cmd, append([]string(nil), t.answers...)
		gate := s.gate
		s.mu.Unlock()

		if ec.StoredTask == nil {
			if !yield(spec.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
		}
		status := func(st spec.TaskState, text string) bool {
			return yield(spec.NewStatusUpdateEvent(ec, st, spec.NewMessageForTask(spec.MessageRoleAgent, ec, spec.NewTextPart(text))), nil)
		}
		word, rest, _ := strings.Cut(cmd, " ")
		switch word {
		case "slow":
			if !status(spec.TaskStateWorking, "started") {
				return
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return
			}
			if !yield(spec.NewArtifactEvent(ec, spec.NewTextPart("done: "+rest)), nil) {
				return
			}
			status(spec.TaskStateCompleted, "")
		case "ask":
			n, _ := strconv.Atoi(rest)
			if turn <= n {
				status(spec.TaskStateInputRequired, fmt.Sprintf("question %d of %d?", turn, n))
				return
			}
			if !yield(spec.NewArtifactEvent(ec, spec.NewTextPart("answers: "+strings.Join(answers, "; "))), nil) {
				return
			}
			status(spec.TaskStateCompleted, "")
		case "same":
			status(spec.TaskStateInputRequired, "what is your name?")
		case "new":
			status(spec.TaskStateInputRequired, fmt.Sprintf("question %d?", turn))
		default:
			if !yield(spec.NewArtifactEvent(ec, spec.NewTextPart(cmd)), nil) {
				return
			}
			status(spec.TaskStateCompleted, "")
		}
	}
}

func (e *executor) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	e.s.mu.Lock()
	e.s.canceled = append(e.s.canceled, ec.TaskID)
	e.s.mu.Unlock()
	return func(yield func(spec.Event, error) bool) {
		yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateCanceled, nil), nil)
	}
}

// returnAtOnce makes every SendMessage return at the task's first event.
type returnAtOnce struct{}

func (returnAtOnce) Before(ctx context.Context, _ *a2asrv.CallContext, req *a2asrv.Request) (context.Context, any, error) {
	if m, ok := req.Payload.(*spec.SendMessageRequest); ok {
		if m.Config == nil {
			m.Config = &spec.SendMessageConfig{}
		}
		m.Config.ReturnImmediately = true
	}
	return ctx, nil, nil
}

func (returnAtOnce) After(context.Context, *a2asrv.CallContext, *a2asrv.Response) error { return nil }

// counter counts sends.
type counter struct{ s *Server }

func (c counter) Before(ctx context.Context, _ *a2asrv.CallContext, req *a2asrv.Request) (context.Context, any, error) {
	if _, ok := req.Payload.(*spec.SendMessageRequest); ok {
		c.s.mu.Lock()
		c.s.sends++
		c.s.mu.Unlock()
	}
	return ctx, nil, nil
}

func (counter) After(context.Context, *a2asrv.CallContext, *a2asrv.Response) error { return nil }
