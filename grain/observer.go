package grain

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Observer receives the runtime's per-message events, for metrics. Package
// cluster implements it with Prometheus counters and histograms; grain
// imports no metrics library.
//
// Its methods are called on the hot path of every message, concurrently,
// from the goroutines that send and handle messages (an activation's
// mailbox goroutine, or a sender's for a re-entrant turn). They must be
// cheap, must not block and should not allocate.
type Observer interface {
	// Handled is called after an agent of type typ handled a message of
	// kind kind (a timer tick counts as a ONE_WAY message), its handler
	// having run for d and ended with code (codes.OK, or the code of the
	// error or panic the caller got). Each message is handled by one
	// silo: the one hosting the agent.
	Handled(typ string, kind Kind, code codes.Code, d time.Duration)
	// Refused is called when a message this runtime was asked to deliver
	// failed before an agent handled it: invalid (InvalidArgument,
	// ResourceExhausted), for an unregistered type (NotFound), refused
	// while shutting down (Unavailable), or given up while waiting for
	// room in a full mailbox (DeadlineExceeded, Canceled). typ is the
	// address's type if it is registered, else "" (so that callers cannot
	// mint label values). Messages forwarded to other silos are observed
	// there, not here.
	Refused(typ string, kind Kind, code codes.Code)
}

// refused reports a message that failed before an agent handled it.
func (rt *Runtime) refused(msg *Message, err error) {
	o := rt.cfg.Observer
	if o == nil || err == nil {
		return
	}
	typ, _, _ := strings.Cut(msg.To, ":")
	if _, ok := rt.reg.Lookup(typ); !ok {
		typ = ""
	}
	o.Refused(typ, msg.Kind, errs.Code(err))
}

// handled reports a message handled by a, whose handler started at start.
func (a *activation) handled(msg *Message, err error, start time.Time) {
	code := codes.OK
	if err != nil {
		code = errs.Code(err)
	}
	a.rt.cfg.Observer.Handled(a.typ(), msg.Kind, code, time.Since(start))
}

// ActivationCount is the number of live activations of one agent type, and
// the messages queued in their mailboxes.
type ActivationCount struct {
	Type string
	// Activations is the number of live activations of Type.
	Activations int
	// Queued is the number of messages waiting in their mailboxes, and
	// MaxQueued the most waiting at one of them.
	Queued, MaxQueued int
}

// CountActivations returns, per registered agent type with live
// activations, their number and mailbox depths: what a metrics scrape
// needs, without the per-activation records of Activations.
func (rt *Runtime) CountActivations() []ActivationCount {
	idx := make(map[string]int)
	var out []ActivationCount
	rt.dir.each(func(a *activation) {
		i, ok := idx[a.typ()]
		if !ok {
			i = len(out)
			idx[a.typ()] = i
			out = append(out, ActivationCount{Type: a.typ()})
		}
		c := &out[i]
		c.Activations++
		n := a.mb.UserMessageCount()
		c.Queued += n
		c.MaxQueued = max(c.MaxQueued, n)
	})
	return out
}

// Traceparent returns the W3C traceparent of the message whose turn ctx
// belongs to (ctx is, or derives from, the context an agent's handler got),
// else the one WithTraceparent put in ctx, or "" if there is none. Every
// message an agent sends from a turn carries it.
func Traceparent(ctx context.Context) string {
	if t := turnFrom(ctx); t != nil {
		return t.msg.traceparent
	}
	tp, _ := ctx.Value(traceparentKey{}).(string)
	return tp
}
