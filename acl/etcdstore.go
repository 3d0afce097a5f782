package acl

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// EtcdStore is the Store of a cluster: the ACL document as one JSON value
// under <prefix>acl/document, its revision being the key's etcd
// ModRevision, so that Put is a compare-and-swap on it. Every silo watches
// the key. While etcd is away, Get and Put return Unavailable and Watch
// retries with backoff.
type EtcdStore struct {
	client  *clientv3.Client
	key     string
	timeout time.Duration
	logger  *slog.Logger
}

// NewEtcdStore returns the store under prefix (which ends in "/"). logger
// receives Watch's warnings; nil is slog.Default().
func NewEtcdStore(c *clientv3.Client, prefix string, logger *slog.Logger) *EtcdStore {
	if logger == nil {
		logger = slog.Default()
	}
	return &EtcdStore{client: c, key: prefix + "acl/document", timeout: 5 * time.Second, logger: logger}
}

// WithTimeout sets the bound on each etcd request (default 5 s) and returns
// s. Past it, a request fails with Unavailable.
func (s *EtcdStore) WithTimeout(d time.Duration) *EtcdStore {
	s.timeout = d
	return s
}

// Key returns the etcd key of the document.
func (s *EtcdStore) Key() string { return s.key }

// Get implements Store.
func (s *EtcdStore) Get(ctx context.Context) (Document, int64, error) {
	d, rev, _, err := s.get(ctx)
	return d, rev, err
}

// get also returns the store's revision at the read, to watch from.
func (s *EtcdStore) get(ctx context.Context) (Document, int64, int64, error) {
	octx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Get(octx, s.key)
	if err != nil {
		return Document{}, 0, 0, etcderr.FromCall(ctx, err, "acl: read the ACL")
	}
	if len(resp.Kvs) == 0 {
		return Document{}, 0, resp.Header.Revision, nil
	}
	kv := resp.Kvs[0]
	d, err := decodeDocument(kv.Value)
	if err != nil {
		return Document{}, 0, 0, err
	}
	return d, kv.ModRevision, resp.Header.Revision, nil
}

func decodeDocument(b []byte) (Document, error) {
	var d Document
	if err := json.Unmarshal(b, &d); err != nil {
		return Document{}, errs.Wrap(codes.Internal, err, "acl: the stored ACL is unreadable")
	}
	if err := d.Validate(); err != nil {
		return Document{}, errs.Wrap(codes.Internal, err, "acl: the stored ACL is invalid")
	}
	return d, nil
}

// Put implements Store.
func (s *EtcdStore) Put(ctx context.Context, d Document, rev int64) (int64, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return 0, errs.Wrap(codes.Internal, err, "acl: encode")
	}
	octx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(octx).
		If(clientv3.Compare(clientv3.ModRevision(s.key), "=", rev)).
		Then(clientv3.OpPut(s.key, string(b))).
		Commit()
	if err != nil {
		return 0, etcderr.FromCall(ctx, err, "acl: store the ACL")
	}
	if !resp.Succeeded {
		return 0, ErrConflict
	}
	return resp.Header.Revision, nil
}

// Watch implements Store.
func (s *EtcdStore) Watch(ctx context.Context, f func(Document, int64)) error {
	b := retry.New(100*time.Millisecond, 3*time.Second, nil)
	last := int64(-1)
	for {
		if err := s.watchOnce(ctx, f, &last); ctx.Err() != nil {
			return ctx.Err()
		} else if err != nil {
			s.logger.Warn("acl: watching the ACL in etcd failed; the last rules stay in force; retrying", "err", err)
			if !b.Wait(ctx, nil) {
				return ctx.Err()
			}
			continue
		}
		b.Reset()
	}
}

// watchOnce reads the document, hands it to f if it changed since last, and
// follows the key's changes until the watch breaks.
func (s *EtcdStore) watchOnce(ctx context.Context, f func(Document, int64), last *int64) error {
	d, rev, storeRev, err := s.get(ctx)
	if err != nil {
		return err
	}
	if rev != *last {
		f(d, rev)
		*last = rev
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.client.Watch(wctx, s.key, clientv3.WithRev(storeRev+1)) {
		if err := resp.Err(); err != nil {
			return etcderr.Wrap(err)
		}
		for _, ev := range resp.Events {
			switch ev.Type {
			case clientv3.EventTypePut:
				d, err := decodeDocument(ev.Kv.Value)
				if err != nil {
					s.logger.Error("acl: ignoring an unreadable ACL in etcd; the last rules stay in force", "err", err)
					continue
				}
				f(d, ev.Kv.ModRevision)
				*last = ev.Kv.ModRevision
			case clientv3.EventTypeDelete:
				f(Document{}, 0)
				*last = 0
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errs.New(codes.Unavailable, "acl: the etcd watch ended")
}
