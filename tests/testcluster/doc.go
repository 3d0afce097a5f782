// Package testcluster starts a cluster of real silo processes for tests and
// measurement programs, and drives it: kill -9, graceful stop, restart and
// partition single silos, with named wait conditions bounded by a context
// instead of sleeps, and a checker of the single-activation invariant over a
// journal that every silo appends to.
//
// The silo and client binaries are built once per test binary (see Main).
// Etcd runs embedded in the calling process (cluster.StartEtcd on free
// ports) unless Options.EtcdEndpoints names one. Silo i is named silo-<i>
// and listens on its own loopback address 127.0.0.<10+i> (127.0.0.1 with
// distinct ports where only that one works), on ports picked free at Start
// and kept across restarts. Each silo joins the others' gossip addresses,
// registers the Journal agent type (package examples) on a journal file
// shared by the cluster, and logs to a file in the test's temporary
// directory; when the test fails, the tail of every silo's log is printed.
//
// A test:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testcluster.Main(m)) }
//
//	func TestKill(t *testing.T) {
//		c := testcluster.Start(t, testcluster.Options{Silos: 3})
//		cl := c.Client(t) // an SDK client to every gateway
//		...
//		c.Kill(1)
//		c.WaitGone(c.Silo(1).Name)
//		c.WaitOwner("Journal:t:a", c.Silo(0).Name)
//		c.CheckJournal() // fails the test on two overlapping activations
//	}
//
// Programs (tests/failover) run the same code through Run, which gives them
// a TB.
//
// Every method of Cluster must be called from the test's goroutine, except
// Silo, Ask and Journal, which are safe for concurrent use.
package testcluster
