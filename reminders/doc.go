// Package reminders keeps agents' durable reminders in etcd and fires them.
//
// A reminder is stored under <prefix>reminders/<address>/<name> with its
// whole payload (period, message type, message, first due time), so a tick
// that activates a deactivated agent delivers everything. etcd is written on
// Register and Unregister only, never per tick: the next tick is computed from
// the first due time and the period (Due + k*Period, so ticks never drift),
// and ticks missed while nobody fired them (the silo was down, or the clock
// jumped) fire once, not as a backlog.
//
// A Service serves at once: it loads the reminders in the background, in
// pages, while Register, Unregister and List already work, and then watches
// the prefix for changes made by other silos. It fires only the reminders of
// agents this silo owns (Config.Owns); the cluster calls Rebalance when
// ownership moves. Firing is one goroutine over a min-heap of next due times
// with a single timer; deliveries run on a bounded pool of workers.
//
// Wiring in a silo (the runtime takes the Service, so firing starts once the
// runtime exists):
//
//	svc, err := reminders.New(ctx, reminders.Config{
//		Client:    etcd.Client(),
//		Prefix:    etcd.Prefix(),
//		MinPeriod: time.Minute,
//		Known:     func(t string) bool { _, ok := reg.Lookup(t); return ok },
//	})
//	...
//	gcfg.Reminders = svc
//	rt, err := grain.New(gcfg, reg)
//	...
//	svc.Start(rt.Send)
//	...
//	svc.Close() // before rt.Close: no ticks into a closing runtime
package reminders
