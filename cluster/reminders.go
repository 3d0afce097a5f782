package cluster

import (
	"time"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/membership"
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
