// Package reminders keeps agents' durable reminders in etcd and fires them.
//
// A reminder is stored under
// <prefix>reminder-buckets/<bucket>/<address>/<name> with its whole payload
// (period, message type, message, first due time), so a tick that activates
// a deactivated agent delivers everything. etcd is written on Register and
// Unregister only, never per tick: the next tick is computed from the first
// due time and the period (Due + k*Period, so ticks never drift), and ticks
// missed while nobody fired them (the silo was down, or the clock jumped)
// fire once, not as a backlog.
//
// Reminders are partitioned by owner: an agent's reminders live in its
// bucket (Bucket, one of Buckets), the cluster places buckets over its silos
// (Config.View), and a Service loads, watches and fires only the buckets
// its silo owns, holding nothing of the others. The cluster calls Rebalance
// when its view changes; the Service takes the buckets gained and lets go of
// the ones lost in its own goroutine, at a cost in proportion to what moved,
// and fires nothing whose bucket the view in force does not own. A bucket
// moving between two silos that are both up is handed over: the taker
// fetches it from the old owner's memory (Config.Fetch, Service.Export) at
// the etcd revision that owner had reached and watches from there, instead
// of reading every reminder from etcd (handover.go). Reminders
// of the layout without buckets (<prefix>reminders/<address>/<name>) move
// to their buckets at start (migrate.go).
//
// A Service serves at once: it loads its buckets in the background, in
// pages, while Register, Unregister and List already work, and then watches
// them for changes made by other silos. Firing is one goroutine over a
// min-heap of next due times with a single timer; deliveries run on a
// bounded pool of workers.
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
