// Package testcluster starts a cluster of real silo processes for tests and
// measurement programs, and drives it: kill -9, freeze (SIGSTOP), graceful
// stop, restart and partition single silos, with named wait conditions
// bounded by a context instead of sleeps, and a checker of the
// single-activation invariant over a journal that every silo appends to.
//
// The silo and client binaries are built once per test binary (Build; Main
// removes them). Etcd runs embedded in the calling process
// (etcdstore.Start on free ports) unless Options.EtcdEndpoints names one
// or Options.EtcdMembers asks for an etcd cluster of real processes (Etcd);
// each cluster has its own --etcd-prefix, so clusters can share an etcd.
// Silo i is named silo-<i> and listens on its own loopback address
// 127.0.0.<10+i> (127.0.0.1 where only that one can be bound), on ports
// picked free at Start and kept across restarts. Each silo joins the others'
// gossip addresses, runs with --fault-injection (Build builds `silo` with
// the test hooks, TestHooksTag), registers the demo agents
// (--examples) and the Journal, StateProbe and TopicSink agent types
// (package internal/demoagents) on a journal file shared by the cluster (TopicSink
// writes to the file TopicSink names; ReadTopicSink reads it), and logs
// (JSON) to a file in the test's temporary directory; when the test fails,
// the tail of every silo's log is printed. Options.Args adds flags, such as
// --state-store.
//
// Controls: Kill (SIGKILL), Stop (SIGTERM, expects exit 0), Freeze and Thaw
// (SIGSTOP/SIGCONT: a hung silo whose sockets stay open), Restart (same name
// and addresses, waits until ready), Partition (POST /debug/partition: cut
// off from its peers, not from etcd or clients). Client returns an SDK
// client to some gateways; Ask asks a Journal agent through one gateway and
// returns the silo that answered. The harness's clients declare the
// principal Principal ("test"): give agents addresses it owns
// (Journal:test:a), which the gateways' access control lets it call.
//
// Named waits, each bounded by Options.WaitTimeout and failing the test with
// the last state seen: WaitReady(i) (/readyz answers 200), WaitExited(i)
// (returns the exit code), WaitMembers(n) (every Live silo reports the same
// n members), WaitView(names...), WaitGone(name), WaitOwner(addr, silo) (the
// agent answers from silo through every Live gateway), WaitOwners(addrs...)
// (each from its Owner among the Live silos).
//
// The journal: each Journal activation writes "start" and "end" lines with
// its address, silo, pid and time. CheckJournal pairs them per process; an
// activation without an end ends when its process died, as the harness saw
// it (or at the freeze, for a process killed while frozen). It fails the
// test for any two activations of one address that overlap in time.
//
// A test:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testcluster.Main(m)) }
//
//	func TestKill(t *testing.T) {
//		c := testcluster.Start(t, testcluster.Options{Silos: 3})
//		owner := c.Owner("Journal:test:a")
//		c.WaitOwner("Journal:test:a", owner)
//		...
//		c.Kill(1)
//		c.WaitGone(c.Silo(1).Name)
//		c.WaitOwner("Journal:test:a", c.Owner("Journal:test:a"))
//		c.CheckJournal()
//	}
//
// Programs (tests/failover, tests/chaos) run the same code through Run, which gives them
// a TB.
//
// The controls and waits must be called from the test's goroutine; Silo,
// Names, Live, LiveNames, Owner, Running, PID, Members, Ask, Journal and
// Deaths are safe for concurrent use.
package testcluster
