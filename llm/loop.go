package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// runContext is how a turn runs.
type runContext struct {
	// pushTo is the client session progress is pushed to ("" for none).
	pushTo string
	// ownOnly: the turn runs without its caller (see callContext).
	ownOnly bool
}

// maxTurnSummaries bounds the recorded turn summaries.
const maxTurnSummaries = 256

// run runs the current turn from where its record stands until it ends,
// and returns its answer: a text, or the error that ended it for good (a
// limit, its timeout, a model that refuses the request as bad). Any other
// error (the model unavailable, the caller gone, a save that failed) is
// returned as the error of this attempt, and the turn stays recorded as
// unfinished, to be resumed.
func (a *agent) run(ctx context.Context, rc runContext) (Answer, error) {
	cur := a.rec.Current
	if a.unpark(cur) {
		return a.park(ctx, cur)
	}
	if a.timeLeft(cur) <= 0 {
		return a.end(ctx, a.timedOut(nil))
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeLeft(cur))
	defer cancel()
	if a.tools == nil {
		tools, err := buildTools(ctx, a.h, a.t.reg, &a.t.def)
		if err != nil {
			return a.end(ctx, err)
		}
		a.tools = tools
	}
	def := &a.t.def
	for {
		if a.timeLeft(cur) <= 0 {
			return a.end(ctx, a.timedOut(nil))
		}
		last, calls := a.rec.pending()
		if len(calls) > 0 {
			calls, waiting, err := a.gate(ctx, cur, calls)
			if err != nil {
				return Answer{}, err
			}
			if len(calls) == 0 && waiting {
				return a.park(ctx, cur)
			}
			if err := a.runTools(ctx, rc, cur, calls); err != nil {
				if a.timeLeft(cur) <= 0 {
					return a.end(ctx, a.timedOut(err))
				}
				return Answer{}, err
			}
			continue
		}
		if last != nil && len(last.ToolCalls) == 0 {
			return a.end(ctx, nil)
		}
		if cur.Rounds >= def.Limits.maxRounds() {
			return a.end(ctx, errs.New(codes.ResourceExhausted, "%s: the turn reached limits.max_rounds (%d model calls) without an answer", a.h.Address(), def.Limits.maxRounds()))
		}
		maxTokens := 0
		if limit := int64(def.Limits.MaxOutputTokens); limit > 0 {
			if cur.Usage.OutputTokens >= limit {
				return a.end(ctx, errs.New(codes.ResourceExhausted, "%s: the turn reached limits.max_output_tokens (%d output tokens) without an answer", a.h.Address(), limit))
			}
			maxTokens = int(limit - cur.Usage.OutputTokens)
		}
		if err := a.checkBudget(ctx); err != nil {
			if errs.Code(err) == codes.ResourceExhausted {
				return a.end(ctx, err)
			}
			return Answer{}, err
		}
		if cur.Rounds == 0 {
			if err := a.compact(ctx, rc, cur); err != nil {
				if a.timeLeft(cur) <= 0 {
					return a.end(ctx, a.timedOut(err))
				}
				return Answer{}, err
			}
		}
		if err := a.sessionOf(ctx, cur); err != nil {
			if a.timeLeft(cur) <= 0 {
				return a.end(ctx, a.timedOut(err))
			}
			return Answer{}, err
		}
		a.push(ctx, rc, ProgressType, fmt.Sprintf("round %d: asking %s", cur.Rounds+1, def.Model.Name))
		// What is below user-input goes between data marks (see
		// trust.go).
		msgs, anyFenced := forModel(a.rec.Messages)
		msgs, shared := a.withSession(msgs, cur)
		anyFenced = anyFenced || shared
		system, summaryFenced := a.system()
		if anyFenced || summaryFenced {
			system = strings.TrimSpace(system + "\n\n" + fenceNote)
		}
		resp, err := a.complete(ctx, rc, &Request{
			Model:           def.Model.Name,
			System:          system,
			Messages:        msgs,
			Tools:           a.tools.specs,
			MaxOutputTokens: maxTokens,
		})
		if err != nil {
			if a.timeLeft(cur) <= 0 {
				return a.end(ctx, a.timedOut(err))
			}
			switch errs.Code(err) {
			case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition:
				// Asking again would fail the same way.
				return a.end(ctx, errs.Wrap(errs.Code(err), err, "%s: the model refused the turn's request", a.h.Address()))
			}
			return Answer{}, err
		}
		// Charged before it is recorded: a crash in between asks the model
		// again, and the step's second response is not charged again.
		if err := a.charge(ctx, cur, cur.Rounds+1, resp.Usage); err != nil {
			return Answer{}, err
		}
		a.record(cur, resp)
		var cut error
		if resp.StopReason == StopMaxTokens {
			cut = errs.New(codes.ResourceExhausted, "%s: the model's output was cut at its token limit (%d output tokens in the turn; limits.max_output_tokens %d)", a.h.Address(), cur.Usage.OutputTokens, def.Limits.MaxOutputTokens)
		}
		if len(resp.ToolCalls) == 0 {
			// The answer: recorded with the turn's end, in one write.
			return a.end(ctx, cut)
		}
		if err := a.save(ctx); err != nil {
			return Answer{}, err
		}
		afterStep(ctx, stepModel)
		if cut != nil {
			return a.end(ctx, cut)
		}
		if err := a.loopGuard(cur); err != nil {
			return a.end(ctx, err)
		}
	}
}

// complete makes one model call, in its span, streaming to the caller if
// the type streams.
func (a *agent) complete(ctx context.Context, rc runContext, req *Request) (*Response, error) {
	ctx, step := a.t.tracer.chat(ctx, a.t.def.Model.Provider, req.Model)
	var onDelta func(string)
	var pending strings.Builder
	if a.t.opts.stream {
		onDelta = func(s string) {
			pending.WriteString(s)
			if pending.Len() >= 64 || strings.Contains(s, "\n") {
				a.push(ctx, rc, ProgressDelta, pending.String())
				pending.Reset()
			}
		}
	}
	resp, err := a.t.provider.Complete(ctx, req, onDelta)
	if err == nil && pending.Len() > 0 {
		a.push(ctx, rc, ProgressDelta, pending.String())
	}
	step.end(resp, err)
	return resp, err
}

// record appends a model response to the turn.
func (a *agent) record(cur *Turn, resp *Response) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur.Rounds++
	msg := Message{Role: RoleAssistant, Text: resp.Text, Turn: cur.ID}
	for i, c := range resp.ToolCalls {
		if c.ID == "" {
			c.ID = "call_" + strconv.Itoa(cur.Rounds) + "_" + strconv.Itoa(i+1)
		}
		msg.ToolCalls = append(msg.ToolCalls, c)
	}
	a.rec.Messages = append(a.rec.Messages, msg)
	cur.Usage.add(resp.Usage)
	a.rec.Usage.add(resp.Usage)
}

// loopGuard ends a turn whose model makes the same tool call (name and
// arguments) the repeat limit's number of times.
func (a *agent) loopGuard(cur *Turn) error {
	seen := make(map[string]int)
	for _, m := range a.rec.turnMessages() {
		for _, c := range m.ToolCalls {
			k := c.Name + "\x00" + canonical(c.Arguments)
			seen[k]++
			if seen[k] >= a.t.opts.repeatLimit {
				return errs.New(codes.ResourceExhausted, "%s: the model called %s with the same arguments %d times in one turn (the loop guard's limit); the turn ends", a.h.Address(), clipText(c.Name, 64), seen[k])
			}
		}
	}
	return nil
}

// canonical is JSON arguments in one spelling (keys sorted, no spaces),
// or the text itself if it is not JSON.
func canonical(args string) string {
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return args
	}
	b, err := json.Marshal(v)
	if err != nil {
		return args
	}
	return string(b)
}

// timedOut is the error of a turn past its deadline.
func (a *agent) timedOut(cause error) error {
	msg := fmt.Sprintf("%s: the turn reached limits.timeout (%v) without an answer", a.h.Address(), a.t.def.Limits.timeout())
	if cause != nil {
		return errs.Wrap(codes.DeadlineExceeded, cause, "%s", msg)
	}
	return errs.New(codes.DeadlineExceeded, "%s", msg)
}

// toolResult is a tool call's outcome, as the model gets it.
type toolResult struct {
	call    ToolCall
	text    string
	isError bool
	// label and outside are the result's content label: tool-output, or
	// the label of the reply of the agent the tool asked.
	label   grain.Label
	outside bool
	// ran says the tool ran (it may have had effects); err is its error.
	ran bool
	err error
}

// runTools runs calls, the tool calls of the turn's last response that
// have no recorded result, concurrently, and records each result as it
// arrives: the results that arrive together, or while the last one is
// being saved, in one write. If ctx ends, it stops without recording the
// results the end caused.
func (a *agent) runTools(ctx context.Context, rc runContext, cur *Turn, calls []ToolCall) error {
	tctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	results := make(chan toolResult, len(calls))
	round := cur.Rounds
	// What the calls send is a tool request, no more trusted than what
	// the model has read.
	a.mu.Lock()
	read, outside, _ := lowest(a.rec.Messages, a.rec.Summary)
	a.mu.Unlock()
	sending := grain.LabelToolRequest.Lower(read)
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- a.runTool(tctx, rc, cur, round, c, sending, outside)
		}()
	}
	for left := len(calls); left > 0; {
		var r toolResult
		select {
		case r = <-results:
		case <-ctx.Done():
			return errs.Wrap(codes.DeadlineExceeded, ctx.Err(), "%s: the turn's tools", a.h.Address())
		}
		// The results that arrived with it (or during the last save) are
		// recorded in the same write: each is still saved before the next
		// model call, in one write instead of one each.
		got := []toolResult{r}
		for more := true; more && len(got) < left; {
			select {
			case r = <-results:
				got = append(got, r)
			default:
				more = false
			}
		}
		left -= len(got)
		if err := ctx.Err(); err != nil {
			code := codes.DeadlineExceeded
			if err == context.Canceled {
				code = codes.Canceled
			}
			return errs.Wrap(code, err, "%s: the turn's tools", a.h.Address())
		}
		// A result whose audit record fails is not recorded (its call
		// runs again, with the same key); the ones before it are.
		var unaudited error
		for i, r := range got {
			if unaudited = a.auditTool(ctx, cur, round, r); unaudited != nil {
				got = got[:i]
				break
			}
		}
		if len(got) == 0 {
			return unaudited
		}
		a.mu.Lock()
		for _, r := range got {
			a.rec.Messages = append(a.rec.Messages, Message{Role: RoleTool, ToolCallID: r.call.ID, Name: r.call.Name, Text: r.text, IsError: r.isError, Turn: cur.ID, Label: r.label.Name(), Outside: r.outside})
		}
		a.mu.Unlock()
		if err := a.save(ctx); err != nil {
			return err
		}
		afterStep(ctx, stepTool)
		if unaudited != nil {
			return unaudited
		}
	}
	return nil
}

// runTool runs one call: a tool the definition does not give, arguments
// that are not JSON or not the tool's schema, and the tool's own error all
// become a result the model sees.
func (a *agent) runTool(ctx context.Context, rc runContext, cur *Turn, round int, c ToolCall, sending grain.Label, outside bool) toolResult {
	// The loop's own words (no such tool, arguments the schema refuses)
	// are system; what the tool returns, or fails with, tool-output.
	r := toolResult{call: c, isError: true, label: grain.LabelSystem}
	t := a.tools.byName[c.Name]
	if t == nil {
		r.text = fmt.Sprintf("error: there is no tool %q; the tools are: %s", clipText(c.Name, 64), strings.Join(a.tools.names(), ", "))
		return r
	}
	args := strings.TrimSpace(c.Arguments)
	if args == "" {
		args = "{}"
	}
	if err := validate(t.input, []byte(args)); err != nil {
		r.text = "error: the arguments do not match the tool's schema (JSON Schema " + string(clipSchema(t.spec.Schema)) + "): " + clipText(err.Error(), 500)
		if !json.Valid([]byte(args)) {
			r.text = "error: the arguments are not JSON: " + clipText(err.Error(), 300)
		}
		return r
	}
	a.push(ctx, rc, ProgressType, "calling "+c.Name)
	sctx, step := a.t.tracer.tool(ctx, c.Name, c.ID)
	r.label = grain.LabelToolOutput
	var got resultLabel
	out, err := t.run(sctx, callContext{host: a.h, key: cur.ID + "/" + strconv.Itoa(round) + "/" + c.ID, ownOnly: rc.ownOnly, label: sending, outside: outside, result: &got}, json.RawMessage(args))
	step.end(err)
	if got.set {
		r.label, r.outside = got.label, got.outside
	}
	r.ran, r.err = true, err
	if err != nil {
		r.text = fmt.Sprintf("error (%s): %s", errs.Code(err), clipText(err.Error(), a.t.opts.maxToolResult))
		return r
	}
	r.text, r.isError = bound(out, a.t.opts.maxToolResult), false
	return r
}

// bound cuts a tool's result to max bytes, saying how much was left out.
func bound(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := clipText(s, max)
	return strings.TrimSuffix(cut, "...") + fmt.Sprintf("\n[cut: %d more bytes]", len(s)-len(strings.TrimSuffix(cut, "...")))
}

func clipSchema(s json.RawMessage) []byte {
	if len(s) > 300 {
		return []byte(clipText(string(s), 300))
	}
	return s
}

// end ends the current turn: with its last response's text as the answer
// if failure is nil, else with failure. Calls left without a result get
// one saying they did not run (the conversation stays well formed for the
// next turn); the turn's summary and its answer (by its request's
// idempotency key) are recorded, in one write with the turn's last
// response. The resume reminder stays, for the activation's next turns;
// its next tick, or the activation's end, removes it.
func (a *agent) end(ctx context.Context, failure error) (Answer, error) {
	now := a.t.opts.clk.Now()
	if failure == nil && a.sharing() {
		var text string
		if msgs := a.rec.turnMessages(); len(msgs) > 0 {
			text = msgs[len(msgs)-1].Text
		}
		if err := a.share(ctx, a.rec.Current, text); err != nil {
			return Answer{}, err
		}
	}
	a.mu.Lock()
	cur := a.rec.Current
	ans := Answer{Key: cur.Key, Turn: cur.ID}
	if failure != nil {
		ans.Code, ans.Error, ans.err = errs.Code(failure), failure.Error(), failure
	} else if msgs := a.rec.turnMessages(); len(msgs) > 0 {
		ans.Text = msgs[len(msgs)-1].Text
	}
	// The answer is no more trusted than what the model read.
	read, outside, _ := lowest(a.rec.Messages, a.rec.Summary)
	ans.label, ans.outside = grain.LabelAgentMessage.Lower(read), outside
	if _, calls := a.rec.pending(); len(calls) > 0 {
		for _, c := range calls {
			a.rec.Messages = append(a.rec.Messages, Message{Role: RoleTool, ToolCallID: c.ID, Name: c.Name, Text: "not run: the turn ended: " + clipText(ans.Error, 300), IsError: true, Turn: cur.ID, Label: systemLabel})
		}
	}
	a.rec.keepDecisions(cur)
	a.rec.Turns = append(a.rec.Turns, TurnSummary{ID: cur.ID, Key: cur.Key, From: cur.From, Trigger: cur.Trigger, Started: cur.Started, Ended: now, Rounds: cur.Rounds, Usage: cur.Usage, Error: ans.Error})
	if len(a.rec.Turns) > maxTurnSummaries {
		a.rec.Turns = slices.Clone(a.rec.Turns[len(a.rec.Turns)-maxTurnSummaries:])
	}
	if cur.Key != "" {
		a.rec.Answers = append(a.rec.Answers, Answer{Key: ans.Key, Principal: cur.Principal, Turn: ans.Turn, Text: ans.Text, Code: ans.Code, Error: ans.Error})
		if len(a.rec.Answers) > maxAnswers {
			a.rec.Answers = slices.Clone(a.rec.Answers[len(a.rec.Answers)-maxAnswers:])
		}
	}
	a.rec.Current = nil
	a.rec.trim(a.t.opts.maxRecordBytes)
	a.mu.Unlock()
	// The turn may have ended by its deadline: its record is saved on a
	// context of its own, within the silo's bounds.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	if err := a.save(sctx); err != nil {
		return Answer{}, err
	}
	return ans, nil
}
