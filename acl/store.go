package acl

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// ErrConflict is what Store.Put returns when the document changed since the
// revision it was given: read again and retry. It is an error of its own,
// not an alias, with errs.ErrAborted's code: errors.Is(err,
// errs.ErrAborted) holds for it too.
var ErrConflict = errs.New(codes.Aborted, "acl: the ACL changed meanwhile; read it again and retry")

// Store keeps a cluster's ACL document, with a revision that changes on
// every write. The etcd store is what silos use; MemStore is its in-memory
// counterpart for tests. Methods are safe for concurrent use.
type Store interface {
	// Get returns the stored document and its revision: an empty document
	// and revision 0 if none is stored.
	Get(ctx context.Context) (Document, int64, error)
	// Put stores d if the stored revision is still rev (0: none stored),
	// and returns the new revision. If it is not, Put fails with
	// ErrConflict and stores nothing.
	Put(ctx context.Context, d Document, rev int64) (int64, error)
	// Watch calls f with the stored document and its revision, then again
	// after every change, from one goroutine, until ctx ends; it returns
	// ctx's error then. While the store is unreachable it retries, and f
	// is called once it is back.
	Watch(ctx context.Context, f func(d Document, rev int64)) error
}

// MemStore is a Store in memory.
type MemStore struct {
	mu      sync.Mutex
	doc     Document
	rev     int64 // 0: nothing stored
	next    int64
	changed chan struct{} // closed and replaced on every Put
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{changed: make(chan struct{})} }

// Get implements Store.
func (s *MemStore) Get(ctx context.Context) (Document, int64, error) {
	if err := ctx.Err(); err != nil {
		return Document{}, 0, errs.Wrap(errs.Code(err), err, "acl")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.doc.Clone(), s.rev, nil
}

// Put implements Store.
func (s *MemStore) Put(ctx context.Context, d Document, rev int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, errs.Wrap(errs.Code(err), err, "acl")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev != s.rev {
		return 0, ErrConflict
	}
	s.next++
	s.doc, s.rev = d.Clone(), s.next
	close(s.changed)
	s.changed = make(chan struct{})
	return s.rev, nil
}

// Watch implements Store.
func (s *MemStore) Watch(ctx context.Context, f func(Document, int64)) error {
	last := int64(-1)
	for {
		s.mu.Lock()
		d, rev, changed := s.doc.Clone(), s.rev, s.changed
		s.mu.Unlock()
		if rev != last {
			f(d, rev)
			last = rev
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
