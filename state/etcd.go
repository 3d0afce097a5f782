package state

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// MaxEtcdState is the largest state the etcd store keeps, 1 MiB: etcd holds
// its whole data set in memory and refuses requests over 1.5 MiB by default.
// Larger state is ResourceExhausted; keep it in the PostgreSQL store.
const MaxEtcdState = 1 << 20

// etcdOpTimeout bounds each etcd request, so that a lost etcd answers
// Unavailable instead of holding a turn until the caller's deadline (a
// one-way turn has none).
const etcdOpTimeout = 5 * time.Second

// Etcd is the state store in etcd: agent addr's state is the value of key
// <prefix>state/<addr>, and its etag is that key's mod revision, in decimal
// (a revision is never reused, so neither is an etag). A save is one
// transaction conditioned on the mod revision (0 when the state must not
// exist yet). Methods are safe for concurrent use.
type Etcd struct {
	client *clientv3.Client
	root   string
}

// NewEtcd returns the store on client under prefix (default "/agentsilo/";
// a missing trailing slash is added). Close does not close the client.
func NewEtcd(client *clientv3.Client, prefix string) *Etcd {
	if prefix == "" {
		prefix = "/agentsilo/"
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Etcd{client: client, root: prefix + "state/"}
}

// Key returns the etcd key of addr's state.
func (s *Etcd) Key(addr grain.Address) string { return s.root + addr.String() }

// Load implements grain.StateStore.
func (s *Etcd) Load(ctx context.Context, addr grain.Address) ([]byte, string, error) {
	what := opOn("load", addr)
	octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := s.client.Get(octx, s.Key(addr))
	if err != nil {
		return nil, "", s.fail(ctx, what, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, "", nil
	}
	kv := resp.Kvs[0]
	data := kv.Value
	if data == nil {
		data = []byte{}
	}
	return data, strconv.FormatInt(kv.ModRevision, 10), nil
}

// Save implements grain.StateStore. A state over MaxEtcdState is
// ResourceExhausted.
func (s *Etcd) Save(ctx context.Context, addr grain.Address, data []byte, etag string) (string, error) {
	what := opOn("save", addr)
	if len(data) > MaxEtcdState {
		return "", errs.New(codes.ResourceExhausted, "%s: %d bytes is over the etcd state store's limit of 1 MiB (%d bytes); keep larger state in the PostgreSQL store", what, len(data), MaxEtcdState)
	}
	rev, err := parseETag(etag, what)
	if err != nil {
		return "", err
	}
	key := s.Key(addr)
	octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := s.client.Txn(octx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(data))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return "", s.fail(ctx, what, err)
	}
	if !resp.Succeeded {
		return "", conflict(what, etag, current(resp))
	}
	// The transaction's one put is its revision.
	return strconv.FormatInt(resp.Header.Revision, 10), nil
}

// Delete implements grain.StateStore.
func (s *Etcd) Delete(ctx context.Context, addr grain.Address, etag string) error {
	what := opOn("delete", addr)
	rev, err := parseETag(etag, what)
	if err != nil {
		return err
	}
	key := s.Key(addr)
	octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := s.client.Txn(octx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return s.fail(ctx, what, err)
	}
	if !resp.Succeeded {
		return conflict(what, etag, current(resp))
	}
	return nil
}

// current is the version (mod revision) of the state a failed transaction's
// Else read, 0 if there is none.
func current(resp *clientv3.TxnResponse) int64 {
	if len(resp.Responses) == 0 {
		return -1
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		return kvs[0].ModRevision
	}
	return 0
}

// Close implements Store; the etcd client stays open.
func (s *Etcd) Close() error { return nil }

// fail keeps the caller's own cancellation or deadline and maps etcd's
// failures with the one table (etcderr.FromCall; mostly Unavailable).
func (s *Etcd) fail(ctx context.Context, what fmt.Stringer, err error) error {
	return etcderr.FromCall(ctx, err, "%s", what)
}
