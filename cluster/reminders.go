package cluster

import (
	"context"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/transport"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
	"github.com/agentsilo/agentsilo/reminders"
)

// Reminders follow ownership by bucket: the reminders of an agent live in
// its bucket (reminders.Bucket), and each bucket is placed like an agent,
// by its name (reminders.BucketName), over the view's owners. A silo loads,
// watches and fires only the buckets it owns in its view; a tick goes to its
// agent wherever that agent lives, like any message. At each view change the
// reminder service takes the buckets gained and lets go of the ones lost, in
// its own goroutine (Rebalance returns at once).
//
// A reminder taken over from a silo that died fires once at once if a tick
// fell while nobody may have been firing it: the dead silo may have stopped
// as early as a lease TTL before its removal was seen, so lostAt goes back
// that far. A silo that left gracefully fired until it left.

// startReminders takes this silo's share of the reminders in the view
// installed and starts firing them into rt.
func startReminders(svc *reminders.Service, rt *grain.Runtime, clk clock.Clock) {
	svc.Rebalance(clk.Now())
	svc.Start(rt.Send)
}

// remindersFollowViews is the view observer that rebalances svc. It returns
// at once: the service does the work in its own goroutine.
func remindersFollowViews(svc *reminders.Service, leaseTTL time.Duration, clk clock.Clock) func(prev, cur membership.View) {
	return func(prev, cur membership.View) {
		lostAt := clk.Now()
		for _, mi := range prev.Members {
			if _, ok := cur.Member(mi.Name); !ok && !mi.Leaving {
				lostAt = lostAt.Add(-leaseTTL)
				break
			}
		}
		svc.Rebalance(lostAt)
	}
}

// reminderView is the reminder service's reminders.Config.View: the view
// installed, and whether this silo owns a bucket in it (answered by that
// view's owner table, so once per bucket and view).
func (r *router) reminderView() reminders.View {
	st := r.state.Load()
	return reminders.View{Version: st.view.Version, Owns: func(b int) bool {
		return st.self && st.table.owner(reminders.BucketName(b)) == r.self
	}}
}

// handOverTimeout bounds a silo's fetch of a reminder bucket from the silo
// that held it, and a leaving silo's wait for its buckets to be fetched.
const handOverTimeout = 2 * time.Second

// fetchReminders is the reminder service's reminders.Config.Fetch: it asks
// the silo that owned bucket b in the view before the one installed, if
// that silo is still a member (leaving, or it lost b to a silo that
// joined), for b's reminders. NotFound if there is no such silo: the
// bucket is then read from etcd.
func (r *router) fetchReminders(ctx context.Context, b int) ([]byte, error) {
	prev, cur := r.prev.Load(), r.state.Load()
	if prev == nil {
		return nil, errs.New(codes.NotFound, "no view before: bucket %d is read from etcd", b)
	}
	from := prev.table.owner(reminders.BucketName(b))
	mi, ok := cur.view.Member(from)
	if from == "" || from == r.self || !ok || mi.Unreachable {
		return nil, errs.New(codes.NotFound, "no silo to hand bucket %d over", b)
	}
	// A silo that does not answer at once is not waited for long: the
	// bucket is read from etcd instead.
	ctx, cancel := context.WithTimeout(ctx, handOverTimeout)
	defer cancel()
	reply, err := r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{
		Message:     &agentsilov1.AgentMessage{MessageType: msgReminders, From: r.self, Message: strconv.Itoa(b)},
		ViewVersion: cur.view.Version,
	})
	if err != nil {
		return nil, err
	}
	return reply.GetData(), nil
}

// handOverReminders waits, at most handOverTimeout, until the silos taking
// this leaving silo's reminder buckets over have fetched them (the view
// that marks it leaving gives them away), so that they need not read them
// from etcd. It does not wait if no silo is left to take them.
func (s *Silo) handOverReminders(ctx context.Context) {
	if !slices.ContainsFunc(s.router.state.Load().owners, func(o string) bool { return o != s.cfg.Name }) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, handOverTimeout)
	defer cancel()
	if err := s.reminders.HandedOver(ctx); err != nil {
		s.logger.Debug("reminder buckets not all fetched by the silos taking them over; they read the rest from etcd", "err", err)
	}
}
