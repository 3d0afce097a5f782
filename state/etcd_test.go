package state

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

func TestEtcdConformance(t *testing.T) {
	s := NewEtcd(etcdtest.Start(t).Client(t), "/conf")
	conformance(t, s)
	t.Run("etag errors", func(t *testing.T) { etagErrors(t, s) })
}

// States live under <prefix>state/<address>, and the etag is the key's mod
// revision.
func TestEtcdLayout(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	s := NewEtcd(cli, "/p")
	addr := grain.Address{Type: "Notes", Owner: "alice", Alias: "n1"}
	etag, err := s.Save(t.Context(), addr, []byte("hello"), "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(t.Context(), "/p/state/Notes:alice:n1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get = %v, %v", resp, err)
	}
	if kv := resp.Kvs[0]; string(kv.Value) != "hello" || etag != itoa(kv.ModRevision) {
		t.Fatalf("stored %q at mod revision %d; Save gave etag %q", kv.Value, kv.ModRevision, etag)
	}
	if got := NewEtcd(cli, "").Key(addr); got != "/agentsilo/state/Notes:alice:n1" {
		t.Fatalf("default key %q", got)
	}
}

// A state of up to 1 MiB is kept; one byte more is ResourceExhausted,
// naming the limit, and nothing is written.
func TestEtcdSizeLimit(t *testing.T) {
	s := NewEtcd(etcdtest.Start(t).Client(t), "/size")
	addr := grain.Address{Type: "Big", Owner: "o", Alias: "a"}
	etag, err := s.Save(t.Context(), addr, large(MaxEtcdState), "")
	if err != nil {
		t.Fatalf("Save of exactly 1 MiB = %v", err)
	}
	_, err = s.Save(t.Context(), addr, large(MaxEtcdState+1), etag)
	wantCode(t, err, codes.ResourceExhausted)
	if !strings.Contains(err.Error(), "1 MiB") || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("error %q does not name the limit", err)
	}
	data, cur, err := s.Load(t.Context(), addr)
	if err != nil || len(data) != MaxEtcdState || cur != etag {
		t.Fatalf("after the refused save: %d bytes at %q, %v", len(data), cur, err)
	}
}
