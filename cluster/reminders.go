package cluster

import (
	"time"

	"github.com/agentsilo/agentsilo/cluster/membership"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/reminders"
)

// Reminders follow ownership: a silo fires the reminders of the agents it
// owns in its view (router.owns), and takes over those of an agent that
// moved to it at every view change.
//
// A reminder taken over from a silo that died fires once at once if a tick
// fell while nobody may have been firing it: the dead silo may have stopped
// as early as a lease TTL before its removal was seen, so lostAt goes back
// that far. A silo that left gracefully fired until it left.

// startReminders loads this silo's share of the reminders and starts firing
// them into rt.
func startReminders(svc *reminders.Service, rt *grain.Runtime, clk clock.Clock) {
	svc.Rebalance(clk.Now())
	svc.Start(rt.Send)
}

// remindersFollowViews is the view observer that rebalances svc.
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
