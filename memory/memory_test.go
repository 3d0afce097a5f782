package memory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.LeakOptions()...)
}

// noter is an agent that keeps what it is told in its working memory
// (Memory:<owner>:notes) through memory.Of, and answers "recall K" from it.
type noter struct{ h grain.Host }

func (n noter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	mem := memory.Of(n.h, "notes")
	r := m.Response()
	if k, ok := strings.CutPrefix(m.Message, "recall "); ok {
		e, err := mem.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		r.Message = e.Text
		return r, nil
	}
	k, v, _ := strings.Cut(m.Message, "=")
	_, err := mem.Put(ctx, client.MemoryEntry{Key: k, Text: v, Category: "note"})
	return r, err
}

func startSilo(t *testing.T, e *etcdtest.Server, name string, cfg memory.Config) *cluster.Silo {
	t.Helper()
	reg := grain.NewRegistry()
	if err := memory.Register(reg, cfg); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("Noter", func(h grain.Host) (grain.Agent, error) { return noter{h}, nil }, grain.TypeInfo{}); err != nil {
		t.Fatal(err)
	}
	sc := cluster.DefaultSiloConfig()
	sc.Name = name
	sc.GatewayAddr = "127.0.0.1:0"
	sc.HTTPAddr = ""
	sc.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/mem/"}
	sc.Logger = testutil.Logger()
	s, err := cluster.NewSilo(sc, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func dial(t *testing.T, s *cluster.Silo) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func keys(es []client.MemoryEntry) []string {
	var ks []string
	for _, e := range es {
		ks = append(ks, e.Key)
	}
	return ks
}

// The working memory's operations, its TTL on an injected clock, its
// bounds and what it refuses.
func TestMemory(t *testing.T) {
	e := etcdtest.Start(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	cfg := memory.Config{MaxEntries: 4, MaxBytes: 200, MaxEntryBytes: 100}
	memory.SetClock(&cfg, clk)
	s := startSilo(t, e, "m1", cfg)
	c := dial(t, s)
	ctx := t.Context()
	mem := client.NewMemory(c, "Memory:dev:work")

	put := func(en client.MemoryEntry) {
		t.Helper()
		if _, err := mem.Put(ctx, en); err != nil {
			t.Fatal(err)
		}
	}
	put(client.MemoryEntry{Key: "task/1", Text: "Book the flight to Lisbon", Category: "todo", Tags: []string{"travel"}})
	put(client.MemoryEntry{Key: "task/2", Text: "Renew the passport", Category: "todo", Tags: []string{"travel", "urgent"}, TTL: 10 * time.Minute})
	put(client.MemoryEntry{Key: "fact/1", Value: json.RawMessage(`{"city":"Lisbon"}`), Category: "fact"})

	got, err := mem.Get(ctx, "task/1")
	if err != nil || got.Text != "Book the flight to Lisbon" || !got.Expires.Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("get: %+v %v", got, err)
	}
	for _, tc := range []struct {
		q    client.MemoryQuery
		want []string
	}{
		{client.MemoryQuery{Prefix: "task/"}, []string{"task/1", "task/2"}},
		{client.MemoryQuery{Category: "fact"}, []string{"fact/1"}},
		{client.MemoryQuery{Tag: "urgent"}, []string{"task/2"}},
		{client.MemoryQuery{Limit: 2}, []string{"fact/1", "task/1"}},
	} {
		es, err := mem.List(ctx, tc.q)
		if err != nil || !slices.Equal(keys(es), tc.want) {
			t.Errorf("list %+v: %v %v, want %v", tc.q, keys(es), err, tc.want)
		}
	}
	if es, err := mem.Search(ctx, "lisbon", 0); err != nil || !slices.Equal(keys(es), []string{"fact/1", "task/1"}) {
		t.Errorf("search lisbon: %v %v", keys(es), err)
	}
	if es, err := mem.Search(ctx, "TRAVEL passport", 0); err != nil || !slices.Equal(keys(es), []string{"task/2"}) {
		t.Errorf("search travel passport: %v %v", keys(es), err)
	}

	// TTL: task/2 (10 min) goes first, the rest after 60 min.
	clk.Advance(11 * time.Minute)
	if _, err := mem.Get(ctx, "task/2"); status.Code(err) != codes.NotFound {
		t.Errorf("expired entry: %v", err)
	}
	if es, _ := mem.List(ctx, client.MemoryQuery{}); !slices.Equal(keys(es), []string{"fact/1", "task/1"}) {
		t.Errorf("after 11 min: %v", keys(es))
	}
	clk.Advance(50 * time.Minute)
	if es, _ := mem.List(ctx, client.MemoryQuery{}); len(es) != 0 {
		t.Errorf("after 61 min: %v", keys(es))
	}

	// Bounds: 4 entries, 200 bytes, 100 bytes an entry.
	for i := range 4 {
		put(client.MemoryEntry{Key: "k" + string(rune('0'+i)), Text: "x"})
	}
	if _, err := mem.Put(ctx, client.MemoryEntry{Key: "k4", Text: "x"}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a fifth entry: %v", err)
	}
	put(client.MemoryEntry{Key: "k3", Text: "replacing counts once"})
	if err := mem.Delete(ctx, "k3"); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Put(ctx, client.MemoryEntry{Key: "big", Text: strings.Repeat("b", 101)}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("an entry over 100 bytes: %v", err)
	}
	put(client.MemoryEntry{Key: "b1", Text: strings.Repeat("b", 90)})
	if _, err := mem.Put(ctx, client.MemoryEntry{Key: "b2", Text: strings.Repeat("b", 90)}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("over 200 bytes: %v", err)
	}

	// Bad requests.
	for name, en := range map[string]client.MemoryEntry{
		"no key":   {Text: "x"},
		"bad ttl":  {Key: "t", TTL: -time.Second},
		"bad json": {Key: "j", Value: json.RawMessage(`{`)},
		"long key": {Key: strings.Repeat("k", 513)},
	} {
		if _, err := mem.Put(ctx, en); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := c.Ask(ctx, "Memory:dev:work", &client.Message{MessageType: "memory.put", Data: []byte("not json")}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("not JSON: %v", err)
	}
	if _, err := c.Ask(ctx, "Memory:dev:work", &client.Message{MessageType: "memory.frobnicate"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown type: %v", err)
	}
}

// Agents use a memory through memory.Of; it outlives its silo.
func TestMemoryFromAgentsOutlivesSilo(t *testing.T) {
	e := etcdtest.Start(t)
	s1 := startSilo(t, e, "m1", memory.Config{})
	c := dial(t, s1)
	if _, err := c.Ask(t.Context(), "Noter:dev:n", &client.Message{Message: "color=teal"}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Ask(t.Context(), "Noter:dev:n", &client.Message{Message: "recall color"}); err != nil || r.Message != "teal" {
		t.Fatalf("recall: %v %v", r, err)
	}
	c.Close()
	if err := s1.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	s2 := startSilo(t, e, "m2", memory.Config{})
	c2 := dial(t, s2)
	e2, err := client.NewMemory(c2, "Memory:dev:notes").Get(t.Context(), "color")
	if err != nil || e2.Text != "teal" || e2.Category != "note" {
		t.Fatalf("after the silo: %+v %v", e2, err)
	}
}

// An owner's memories are bounded together, whichever silo runs each: a
// put over the owner's bound is ResourceExhausted in any scope, a delete
// or an expiry in one scope frees room in another, other owners are not
// counted, the account outlives the silo, and nobody but the owner's
// memories writes to it.
func TestMemoryOwnerBounds(t *testing.T) {
	e := etcdtest.Start(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	cfg := memory.Config{MaxEntries: 4, MaxOwnerEntries: 6, MaxOwnerBytes: 300}
	memory.SetClock(&cfg, clk)
	s1 := startSilo(t, e, "m1", cfg)
	s2 := startSilo(t, e, "m2", cfg)
	c1, c2 := dial(t, s1), dial(t, s2)
	ctx := t.Context()
	testutil.WaitFor(t, "two members", func() bool { m, err := c1.Admin().Members(ctx); return err == nil && len(m) == 2 })
	a, b := client.NewMemory(c1, "Memory:dev:a"), client.NewMemory(c2, "Memory:dev:b")
	put := func(mem *client.Memory, en client.MemoryEntry) error {
		_, err := mem.Put(ctx, en)
		return err
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// 4 entries in a (1 with 10 minutes), 2 in b: the owner's 6.
	for i := range 4 {
		ttl := time.Duration(0)
		if i == 0 {
			ttl = 10 * time.Minute
		}
		must(put(a, client.MemoryEntry{Key: fmt.Sprintf("a%d", i), Text: "x", TTL: ttl}))
	}
	must(put(b, client.MemoryEntry{Key: "b0", Text: "x"}))
	must(put(b, client.MemoryEntry{Key: "b1", Text: "x"}))
	err := put(b, client.MemoryEntry{Key: "b2", Text: "x"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "the memories of dev hold 6 entries") {
		t.Fatalf("a seventh entry of dev: %v", err)
	}
	must(put(b, client.MemoryEntry{Key: "b1", Text: "replacing counts once"}))
	// Another owner's memories are not dev's.
	other := dial(t, s1)
	third := client.NewMemory(other, "Memory:dev:c")
	if err := put(third, client.MemoryEntry{Key: "c0", Text: "x"}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("dev's third memory: %v", err)
	}
	c3, err := client.Dial(ctx, []string{s2.GatewayAddr()}, client.WithPrincipal("erin"))
	must(err)
	defer c3.Close()
	must(put(client.NewMemory(c3, "Memory:erin:a"), client.MemoryEntry{Key: "e0", Text: "x"}))
	// A delete in a makes room in b.
	must(a.Delete(ctx, "a3"))
	must(put(b, client.MemoryEntry{Key: "b2", Text: "x"}))
	// An expiry in a makes room in b, a never written since.
	if err := put(b, client.MemoryEntry{Key: "b3", Text: "x"}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the bound again: %v", err)
	}
	clk.Advance(11 * time.Minute)
	must(put(b, client.MemoryEntry{Key: "b3", Text: "x"}))
	// Bytes: dev's entries hold 35 bytes; 300 in all.
	must(b.Delete(ctx, "b3"))
	if err := put(b, client.MemoryEntry{Key: "big", Text: strings.Repeat("y", 280)}); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "over the owner's limit of 300") {
		t.Fatalf("over the owner's bytes: %v", err)
	}
	must(put(b, client.MemoryEntry{Key: "big", Text: strings.Repeat("y", 200)}))

	// The account outlives the silos: both close, a third one counts.
	c1.Close()
	c2.Close()
	other.Close()
	c3.Close()
	must(s1.Close(ctx))
	must(s2.Close(ctx))
	s3 := startSilo(t, e, "m3", cfg)
	c4 := dial(t, s3)
	if err := put(client.NewMemory(c4, "Memory:dev:d"), client.MemoryEntry{Key: "d0", Text: "x"}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("after a restart, a seventh entry of dev: %v", err)
	}

	// The ledger is no memory, and only dev's memories write to it.
	if _, err := c4.Ask(ctx, "Memory:dev:memory.usage", &client.Message{MessageType: "memory.put", Data: []byte(`{"entry":{"key":"k","text":"x"}}`)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a put to the ledger: %v", err)
	}
	if _, err := c4.Ask(ctx, "Memory:dev:memory.usage", &client.Message{MessageType: "memory.release", Data: []byte(`{"key":"x"}`)}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a client writing to the ledger: %v", err)
	}
}

// Register refuses an owner's bound the ledger cannot keep in one value.
func TestMemoryOwnerBoundLimit(t *testing.T) {
	if err := memory.Register(grain.NewRegistry(), memory.Config{MaxOwnerEntries: 20001}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("MaxOwnerEntries 20001: %v", err)
	}
}
