package acl

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/etcdwatch"
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
	octx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Get(octx, s.key)
	if err != nil {
		return Document{}, 0, etcderr.FromCall(ctx, err, "acl: read the ACL")
	}
	return documentOf(resp.Kvs)
}

// documentOf is the document read as kvs (the key, or nothing) and its
// revision, 0 if none is stored.
func documentOf(kvs []*mvccpb.KeyValue) (Document, int64, error) {
	if len(kvs) == 0 {
		return Document{}, 0, nil
	}
	d, err := decodeDocument(kvs[0].Value)
	if err != nil {
		return Document{}, 0, err
	}
	return d, kvs[0].ModRevision, nil
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

// Watch implements Store: f gets the document read, then each change; a
// read again after a broken watch hands it over only if its revision is
// not the one f has.
func (s *EtcdStore) Watch(ctx context.Context, f func(Document, int64)) error {
	last := int64(-1) // the revision f has
	hand := func(d Document, rev int64) {
		f(d, rev)
		last = rev
	}
	w := etcdwatch.Follower{
		Client:  s.client,
		Key:     s.key,
		What:    "acl: read the ACL",
		Timeout: s.timeout,
		Load: func(kvs []*mvccpb.KeyValue, _ int64) error {
			d, rev, err := documentOf(kvs)
			if err == nil && rev != last {
				hand(d, rev)
			}
			return err
		},
		Events: func(evs []*clientv3.Event, _ int64) {
			for _, ev := range evs {
				if ev.Type == clientv3.EventTypeDelete {
					hand(Document{}, 0)
					continue
				}
				d, err := decodeDocument(ev.Kv.Value)
				if err != nil {
					s.logger.Error("acl: ignoring an unreadable ACL in etcd; the last rules stay in force", "err", err)
					continue
				}
				hand(d, ev.Kv.ModRevision)
			}
		},
		Failed: func(err error) {
			s.logger.Warn("acl: watching the ACL in etcd failed; the last rules stay in force; retrying", "err", err)
		},
	}
	w.Run(ctx)
	return ctx.Err()
}
