package cluster

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/transport"
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
	told      map[incarnation]bool // members told of a sweep of a view holding them; the sweep's own

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newViews(r *router, rt *grain.Runtime, observers ...func(prev, cur membership.View)) *views {
	f := &views{r: r, rt: rt, observers: observers, told: make(map[incarnation]bool)}
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

// sweep deactivates what v moved away and tells the peers that need to
// know (see msgSwept): the members it has not told since they joined, or
// every member while this silo is leaving, when each may take over what it
// held. A notice not delivered is sent again after the next sweep.
func (f *views) sweep(v membership.View) {
	r := f.r
	if err := siloapi.Of(f.rt).Rehome(f.ctx, func(key string) bool { return r.Route(key) == "" }); err != nil {
		return // closing
	}
	me, ok := v.Member(r.self)
	if !ok {
		r.closeDeparted()
		return // not in this view: no peer takes anything from it by it
	}
	for inc := range f.told { // forget the members that left
		if mi, ok := v.Member(inc.name); !ok || mi.LeaseID != inc.lease {
			delete(f.told, inc)
		}
	}
	for _, mi := range v.Members {
		inc := incarnation{mi.Name, mi.LeaseID}
		if mi.Name == r.self || (f.told[inc] && !me.Leaving) {
			continue
		}
		if _, ok := r.state.Load().view.Member(mi.Name); !ok {
			continue // left in a newer view
		}
		ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
		r.notices.Add(1)
		err := r.tp.Send(ctx, mi.PeerAddr, &transport.Envelope{
			Kind: agentsilov1.Kind_KIND_ONE_WAY,
			Message: &agentsilov1.AgentMessage{MessageType: msgSwept, From: r.self,
				Message: strconv.FormatInt(mi.LeaseID, 10) + " " + strconv.FormatInt(me.LeaseID, 10)},
			ViewVersion: v.Version,
		})
		cancel()
		if err != nil {
			r.log.Debug("could not tell a peer the view is swept", "peer", mi.Name, "err", err)
			continue
		}
		f.told[inc] = true
	}
	r.closeDeparted()
}
