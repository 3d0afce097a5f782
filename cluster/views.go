package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/agentsilo/agentsilo/cluster/membership"
	"github.com/agentsilo/agentsilo/cluster/transport"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// views follows the membership's views: it installs each in the router as
// it comes, and sweeps beside, on the newest view: the runtime deactivates
// the activations the view moved away (after their current turn), then the
// peers are told the view is swept. A long turn therefore never holds up
// routing by a newer view. After each view, the observers run (the
// reminders follow ownership through one).
type views struct {
	r         *router
	rt        *grain.Runtime
	observers []func(prev, cur membership.View)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newViews(r *router, rt *grain.Runtime, observers ...func(prev, cur membership.View)) *views {
	f := &views{r: r, rt: rt, observers: observers}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f
}

// start installs the current view, and follows the views from then on.
func (f *views) start() {
	r := f.r
	views, cancel := r.m.Subscribe()
	r.install(<-views)
	sweeps := make(chan membership.View, 1)
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		defer cancel()
		defer close(sweeps)
		prev := r.state.Load().view
		sweeps <- prev
		for {
			select {
			case <-f.ctx.Done():
				return
			case v, ok := <-views:
				if !ok {
					return
				}
				r.install(v)
				r.closeDeparted()
				select { // replace a sweep not yet started
				case <-sweeps:
				default:
				}
				sweeps <- v
				for _, o := range f.observers {
					o(prev, v)
				}
				prev = v
			}
		}
	}()
	go func() {
		defer f.wg.Done()
		for v := range sweeps {
			f.sweep(v)
		}
	}()
}

// stop ends the following; it may be called without start.
func (f *views) stop() {
	f.cancel()
	f.wg.Wait()
}

// sweep deactivates what v moved away and tells the peers.
func (f *views) sweep(v membership.View) {
	r := f.r
	if err := siloapi.Of(f.rt).Rehome(f.ctx, func(key string) bool { return r.Route(key) == "" }); err != nil {
		return // closing
	}
	for _, mi := range v.Members {
		if mi.Name == r.self {
			continue
		}
		if _, ok := r.state.Load().view.Member(mi.Name); !ok {
			continue // left in a newer view
		}
		ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
		err := r.tp.Send(ctx, mi.PeerAddr, &transport.Envelope{
			Kind:        agentsilov1.Kind_KIND_ONE_WAY,
			Message:     &agentsilov1.AgentMessage{MessageType: msgSwept, From: r.self},
			ViewVersion: v.Version,
		})
		cancel()
		if err != nil {
			r.log.Debug("could not tell a peer the view is swept", "peer", mi.Name, "err", err)
		}
	}
	r.closeDeparted()
}
