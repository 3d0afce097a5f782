package topicstore

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// A subscription written by the layout before the log (a copy of each
// message under q/<id>/, no cursor) is taken over as it is: its copies are
// its held entries, delivered first and in their order, it gets a cursor,
// and what is published from then on goes to the log and reaches it after
// them.
func TestEtcdMigratesQueuesOfTheLayoutBefore(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	const root = "/old/topics/"
	put := func(k string, m proto.Message) {
		t.Helper()
		v := []byte{}
		if m != nil {
			var err error
			if v, err = proto.Marshal(m); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cli.Put(t.Context(), root+k, string(v)); err != nil {
			t.Fatal(err)
		}
	}
	put("reg/sub/acme:work", &SubscriptionRecord{Id: "acme:work", Pattern: "acme:jobs.#", MaxAttempts: 5})
	put("reg/member/acme:work/W:acme:a", nil)
	put("reg/ver/acme", nil)
	for i := range 3 {
		put(fmt.Sprintf("q/acme:work/old-%016x", i), &Entry{Message: entryMsg(fmt.Sprint("old", i))})
	}
	put("q/acme:work/old-retried", &Entry{Message: entryMsg("old retried"), Attempts: 2, LastError: "boom"})

	s := NewEtcdStore(cli, "/old/", nil)
	work := follow(t, s, "acme:work")
	if got := fmt.Sprint(work.texts(t, 4)); got != "[old0 old1 old2 old retried]" {
		t.Fatalf("old queue read as %s", got)
	}
	if r, err := cli.Get(t.Context(), root+"cur/acme/acme:work"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("no cursor after the first follow: %v %v", r, err)
	}
	work.mu.Lock()
	if e := work.live[work.keys[3]]; e.GetAttempts() != 2 || e.GetLastError() != "boom" {
		t.Fatalf("the retried entry lost its state: %v", e)
	}
	work.mu.Unlock()
	versions := registryOf(t, s).Versions
	for i := range 2 {
		if err := s.Append(t.Context(), []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entry(fmt.Sprint("new", i))}}, versions); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(work.texts(t, 6)); got != "[old0 old1 old2 old retried new0 new1]" {
		t.Fatalf("queue %s", got)
	}
	var acks []AckKey
	work.mu.Lock()
	for _, k := range work.keys {
		acks = append(acks, AckKey{"acme:work", k})
	}
	work.mu.Unlock()
	if err := s.Ack(t.Context(), acks); err != nil {
		t.Fatal(err)
	}
	work.texts(t, 0)
	if r, err := cli.Get(t.Context(), root+"q/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Fatalf("old copies left after their acknowledgement: %v %v", r.Count, err)
	}
	// Read again from etcd, the queue is empty: the cursor passed the new
	// records.
	if st, err := s.loadQueue(t.Context(), "acme:work", nil); err != nil || len(st.events) != 0 {
		t.Fatalf("queue read again: %v %v", st.events, err)
	}
}

// A message is one record whatever the subscriptions; what one
// subscription acknowledged is not delivered to it again by a store that
// follows its queue afresh (a restart), while the rest is; records go once
// every subscription passed them.
func TestEtcdOneRecordAndCursors(t *testing.T) {
	srv := etcdtest.Start(t)
	s, cli, versions := etcdWithSubs(t, srv, 3)
	for i := range 5 {
		if err := s.Append(t.Context(), []*Item{{Owner: "acme", Subs: subIDs(3), Entry: entry(fmt.Sprint(i))}}, versions); err != nil {
			t.Fatal(err)
		}
	}
	logCount := func() int64 {
		r, err := cli.Get(t.Context(), s.logPrefix("acme"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count
	}
	if n := logCount(); n != 5 {
		t.Fatalf("%d records for 5 messages to 3 subscriptions", n)
	}
	ackAll := func(f *follower, id string, n int) {
		t.Helper()
		var acks []AckKey
		f.mu.Lock()
		for _, k := range f.keys[:n] {
			acks = append(acks, AckKey{id, k})
		}
		f.mu.Unlock()
		if err := s.Ack(t.Context(), acks); err != nil {
			t.Fatal(err)
		}
	}
	f0 := follow(t, s, "acme:s0")
	f0.texts(t, 5)
	ackAll(f0, "acme:s0", 3)
	f0.texts(t, 2)

	again := NewEtcdStore(cli, "/test/", nil)
	if got := fmt.Sprint(follow(t, again, "acme:s0").texts(t, 2)); got != "[3 4]" {
		t.Fatalf("after a restart: %s", got)
	}
	for i := range 3 {
		id := fmt.Sprintf("acme:s%d", i)
		f := follow(t, s, id)
		n := len(f.texts(t, map[int]int{0: 2, 1: 5, 2: 5}[i]))
		ackAll(f, id, n)
		f.texts(t, 0)
	}
	s.gcLog(t.Context(), "acme", true)
	if n := logCount(); n != 0 {
		t.Fatalf("%d records left once every subscription passed them", n)
	}
}
