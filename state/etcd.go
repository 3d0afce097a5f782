package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
// one-way turn has none). It is shorter than an Ask's usual deadline on
// purpose: a request that a follower forwarded to a leader that then died
// waits for the server's own timeout (seconds past the election), while
// the same request made again reaches the new leader at once. The
// runtime makes a read or a write whose outcome is unknown again while
// the caller's deadline allows (see grain.Host.SaveState), so an etcd
// leader change delays a turn by about the election, and fails none.
const etcdOpTimeout = 2 * time.Second

// Etcd is the state store in etcd: agent addr's state is the value of key
// <prefix>state/<addr>, and its etag is that key's mod revision, in decimal
// (a revision is never reused, so neither is an etag). A save is one
// transaction conditioned on the mod revision (0 when the state must not
// exist yet). A save made in the turn of a message with an idempotency key
// (SaveKeyed) also puts <prefix>state-keys/<addr>/<key> in the same
// transaction, on a lease that keeps it for at least KeyWindow, and is
// conditioned on that key not existing yet. Methods are safe for concurrent
// use.
type Etcd struct {
	client *clientv3.Client
	root   string
	keys   string // prefix of the idempotency keys' records

	mu      sync.Mutex
	lease   clientv3.LeaseID // the lease new key records go on; 0: none yet
	leaseAt time.Time        // when it was granted
}

// KeyWindow is how long the etcd store keeps the record of a save's
// idempotency key at least: the runtime's default IdempotencyWindow. Records
// share a lease granted once a minute, with a time to live of KeyWindow and
// a minute; etcd deletes them when it expires.
const KeyWindow = 10 * time.Minute

var _ grain.KeyedStateStore = (*Etcd)(nil)

// NewEtcd returns the store on client under prefix (default "/agentsilo/";
// a missing trailing slash is added). Close does not close the client.
func NewEtcd(client *clientv3.Client, prefix string) *Etcd {
	if prefix == "" {
		prefix = "/agentsilo/"
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Etcd{client: client, root: prefix + "state/", keys: prefix + "state-keys/"}
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
	return s.save(ctx, addr, data, etag, "")
}

// SaveKeyed implements grain.KeyedStateStore: Save, and the record of key
// in the same transaction, unless key is recorded already: then nothing is
// written and the error is grain.ErrApplied (AlreadyExists).
func (s *Etcd) SaveKeyed(ctx context.Context, addr grain.Address, data []byte, etag, key string) (string, error) {
	return s.save(ctx, addr, data, etag, key)
}

// Applied implements grain.KeyedStateStore: whether the record of key is
// there, and the etag of the save that put it.
func (s *Etcd) Applied(ctx context.Context, addr grain.Address, key string) (string, bool, error) {
	octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := s.client.Get(octx, s.keyKey(addr, key), clientv3.WithKeysOnly())
	if err != nil {
		return "", false, s.fail(ctx, text("look up the idempotency key of a save of the state of "+addr.String()), err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return strconv.FormatInt(resp.Kvs[0].CreateRevision, 10), true, nil
}

// keyKey is the etcd key of the record of key's save of addr's state.
func (s *Etcd) keyKey(addr grain.Address, key string) string {
	return s.keys + addr.String() + "/" + key
}

func (s *Etcd) save(ctx context.Context, addr grain.Address, data []byte, etag, idemKey string) (string, error) {
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
	if idemKey == "" {
		resp, err := s.client.Txn(octx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(data))).
			Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
			Commit()
		if err != nil {
			return "", s.failWrite(ctx, what, err)
		}
		if !resp.Succeeded {
			return "", conflict(what, etag, current(resp))
		}
		// The transaction's one put is its revision.
		return strconv.FormatInt(resp.Header.Revision, 10), nil
	}
	rec := s.keyKey(addr, idemKey)
	for try := 0; ; try++ {
		lease, err := s.keyLease(octx)
		if err != nil {
			// Nothing was written.
			return "", s.fail(ctx, what, err)
		}
		resp, err := s.client.Txn(octx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev), clientv3.Compare(clientv3.CreateRevision(rec), "=", 0)).
			Then(clientv3.OpPut(key, string(data)), clientv3.OpPut(rec, etag, clientv3.WithLease(lease))).
			Else(clientv3.OpGet(key, clientv3.WithKeysOnly()), clientv3.OpGet(rec, clientv3.WithKeysOnly())).
			Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && try == 0 {
			s.dropLease(lease) // expired or revoked: the transaction was refused
			continue
		}
		if err != nil {
			return "", s.failWrite(ctx, what, err)
		}
		if !resp.Succeeded {
			if len(resp.Responses) > 1 {
				if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
					return "", errs.Wrap(codes.AlreadyExists, grain.ErrApplied, "%s: a save with idempotency key %q landed already (etag %d), so this one wrote nothing; its change is not applied twice", what, idemKey, kvs[0].CreateRevision)
				}
			}
			return "", conflict(what, etag, current(resp))
		}
		return strconv.FormatInt(resp.Header.Revision, 10), nil
	}
}

// keyLease returns the lease for new idempotency key records, granting one
// if there is none or it is a minute old.
func (s *Etcd) keyLease(ctx context.Context) (clientv3.LeaseID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease != 0 && time.Since(s.leaseAt) < time.Minute {
		return s.lease, nil
	}
	g, err := s.client.Grant(ctx, int64((KeyWindow+time.Minute)/time.Second))
	if err != nil {
		return 0, err
	}
	s.lease, s.leaseAt = g.ID, time.Now()
	return g.ID, nil
}

// dropLease forgets lease, if it is the current one.
func (s *Etcd) dropLease(lease clientv3.LeaseID) {
	s.mu.Lock()
	if s.lease == lease {
		s.lease = 0
	}
	s.mu.Unlock()
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
		return s.failWrite(ctx, what, err)
	}
	if !resp.Succeeded {
		return conflict(what, etag, current(resp))
	}
	return nil
}

// List implements grain.StateLister: a range read of the keys (no values)
// under <prefix>state/<typ>:<owner>:, after after's key.
func (s *Etcd) List(ctx context.Context, typ, owner, after string, limit int) ([]grain.Address, error) {
	what := text("list the agents of type " + typ + " and owner " + owner + " with state")
	if !grain.ValidType(typ) || !grain.ValidName(owner) || limit <= 0 {
		return nil, errs.New(codes.InvalidArgument, "%s: want a type, an owner and a limit over 0", what)
	}
	prefix := s.root + typ + ":" + owner + ":"
	from := prefix
	if after != "" {
		from = prefix + after + "\x00"
	}
	octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := s.client.Get(octx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit)), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, s.fail(ctx, what, err)
	}
	out := make([]grain.Address, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		alias := strings.TrimPrefix(string(kv.Key), prefix)
		if grain.ValidName(alias) {
			out = append(out, grain.Address{Type: typ, Owner: owner, Alias: alias})
		}
	}
	return out, nil
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

// failWrite is fail for a write that may have been applied: its message
// says that the outcome is unknown.
func (s *Etcd) failWrite(ctx context.Context, what fmt.Stringer, err error) error {
	return etcderr.FromCall(ctx, err, "%s (it may have landed: its outcome is unknown)", what)
}

// fail keeps the caller's own cancellation or deadline and maps etcd's
// failures with the one table (etcderr.FromCall; mostly Unavailable).
func (s *Etcd) fail(ctx context.Context, what fmt.Stringer, err error) error {
	return etcderr.FromCall(ctx, err, "%s", what)
}
