package memory

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// An owner's bounds (Config.MaxOwnerEntries, MaxOwnerBytes) hold over all
// its memories, which may run on different silos. One more memory keeps
// the account: Memory:<owner>:memory.usage, the ledger, which holds, for
// each scope of the owner, each entry's size and expiry (a hash of its
// key, so an entry costs the ledger ~50 bytes whatever its key). A put
// asks the ledger first (memory.reserve): the ledger counts the owner's
// live entries but the one replaced, refuses with ResourceExhausted over a
// bound, else records the entry. A delete tells it (memory.release). An
// entry that expires is no longer counted from its expiry on, in whichever
// scope it is: expired entries are evicted from the account without a
// message. A memory sends its live entries (memory.sync) before its first
// put of an activation, so that the account follows what is stored even
// after a write that failed half-way, or entries stored before the ledger
// existed.
//
// Only the owner's own memories write to the ledger (the sender of a
// message is set by the runtime); the scope memory.usage is not a memory
// anyone can put to.

// usageScope is the ledger's scope.
const usageScope = "memory.usage"

// The ledger's message types: sent by the owner's memories only.
const (
	msgReserve = "memory.reserve"
	msgRelease = "memory.release"
	msgSync    = "memory.sync"
)

// maxOwnerEntriesLimit bounds MaxOwnerEntries: the ledger keeps its
// account as one stored value (etcd takes up to 1.5 MiB; a record is
// about 50 bytes).
const maxOwnerEntriesLimit = 20000

// rec is one entry as the ledger counts it.
type rec struct {
	Bytes   int   `json:"b"`
	Expires int64 `json:"x"` // Unix nanoseconds
}

// usage is the ledger's state: by scope, by key hash.
type usage struct {
	Scopes map[string]map[string]rec `json:"scopes,omitempty"`
}

// ledgerRequest is the data of a message to the ledger. The scope is the
// sender's.
type ledgerRequest struct {
	Key   string         `json:"key,omitempty"` // keyHash of the entry's key
	Rec   *rec           `json:"rec,omitempty"`
	Force bool           `json:"force,omitempty"` // record without checking: undoing a reserve
	Recs  map[string]rec `json:"recs,omitempty"`  // sync: every live entry of the scope
}

// keyHash names an entry's key in the ledger.
func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(h[:12])
}

func recOf(e client.MemoryEntry) rec {
	return rec{Bytes: entrySize(e), Expires: e.Expires.UnixNano()}
}

// ledgerAddr is the ledger of the agent's owner.
func (a *agent) ledgerAddr() string {
	return grain.Address{Type: Type, Owner: a.h.Owner(), Alias: usageScope}.String()
}

// isLedger reports whether the agent is its owner's ledger.
func (a *agent) isLedger() bool { return a.h.Address().Alias == usageScope }

// tellLedger asks the owner's ledger to take req.
func (a *agent) tellLedger(ctx context.Context, typ string, req ledgerRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return errs.Wrap(codes.Internal, err, "%s: encode the ledger request", a.h.Address())
	}
	_, err = a.h.Ask(ctx, a.ledgerAddr(), &grain.Message{MessageType: typ, Data: b, DataType: "application/json"})
	return err
}

// sync sends the ledger the scope's live entries, once an activation.
func (a *agent) sync(ctx context.Context, now time.Time) error {
	if a.synced {
		return nil
	}
	recs := make(map[string]rec, len(a.st.Value.Entries))
	for k, e := range a.st.Value.Entries {
		if e.Expires.After(now) {
			recs[k] = recOf(e)
		}
	}
	hashed := make(map[string]rec, len(recs))
	for k, r := range recs {
		hashed[keyHash(k)] = r
	}
	if err := a.tellLedger(ctx, msgSync, ledgerRequest{Recs: hashed}); err != nil {
		return err
	}
	a.synced = true
	return nil
}

// undo puts the ledger back as it was before a reserve of key whose write
// failed: old's record, or none. A failure is logged: the next put's sync
// sets the account right.
func (a *agent) undo(ctx context.Context, key string, old *client.MemoryEntry) {
	var err error
	if old != nil {
		r := recOf(*old)
		err = a.tellLedger(context.WithoutCancel(ctx), msgReserve, ledgerRequest{Key: keyHash(key), Rec: &r, Force: true})
	} else {
		err = a.tellLedger(context.WithoutCancel(ctx), msgRelease, ledgerRequest{Key: keyHash(key)})
	}
	if err != nil {
		a.h.Logger().Warn("memory: the owner's ledger was not put back after a failed put; the next put sets it right", "err", err)
	}
}

// ledger serves a message to the owner's ledger.
func (a *agent) ledger(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	switch m.MessageType {
	case msgReserve, msgRelease, msgSync:
	default:
		return nil, errs.New(codes.InvalidArgument, "%s: the scope %s is reserved: it keeps the bounds of %s's memories", a.h.Address(), usageScope, a.h.Owner())
	}
	from, err := grain.ParseAddress(m.From)
	if err != nil || from.Type != Type || from.Owner != a.h.Owner() || from.Alias == usageScope {
		return nil, errs.New(codes.PermissionDenied, "%s: only %s's memories write to it", a.h.Address(), a.h.Owner())
	}
	var req ledgerRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return nil, errs.Wrap(codes.InvalidArgument, err, "%s: the data is not a ledger request", a.h.Address())
	}
	if a.usage == nil {
		a.usage = grain.NewState[usage](a.h)
		if err := a.usage.Load(ctx); err != nil {
			a.usage = nil
			return nil, err
		}
	}
	now := a.cfg.clk.Now().UnixNano()
	scope := from.Alias
	err = a.usage.Update(ctx, func(u *usage) error {
		evict(u, now)
		if u.Scopes == nil {
			u.Scopes = map[string]map[string]rec{}
		}
		switch m.MessageType {
		case msgSync:
			u.Scopes[scope] = nil
			for k, r := range req.Recs {
				if r.Expires > now {
					put(u, scope, k, r)
				}
			}
		case msgRelease:
			delete(u.Scopes[scope], req.Key)
		case msgReserve:
			if req.Rec == nil || req.Key == "" {
				return errs.New(codes.InvalidArgument, "%s: reserve needs a key and a record", a.h.Address())
			}
			if !req.Force {
				n, size := 0, 0
				for s, recs := range u.Scopes {
					for k, r := range recs {
						if s != scope || k != req.Key {
							n, size = n+1, size+r.Bytes
						}
					}
				}
				if n+1 > a.cfg.MaxOwnerEntries {
					return errs.New(codes.ResourceExhausted, "the memories of %s hold %d entries, the owner's limit", a.h.Owner(), n)
				}
				if size+req.Rec.Bytes > a.cfg.MaxOwnerBytes {
					return errs.New(codes.ResourceExhausted, "the memories of %s would hold %d bytes, over the owner's limit of %d", a.h.Owner(), size+req.Rec.Bytes, a.cfg.MaxOwnerBytes)
				}
			}
			put(u, scope, req.Key, *req.Rec)
		}
		if len(u.Scopes[scope]) == 0 {
			delete(u.Scopes, scope)
		}
		return nil
	})
	if err != nil {
		if errs.Code(err) != codes.ResourceExhausted && errs.Code(err) != codes.InvalidArgument {
			a.usage = nil // load again: the save may or may not have been stored
		}
		return nil, err
	}
	if m.Kind != grain.KindRequest {
		return nil, nil
	}
	return m.Response(), nil
}

func put(u *usage, scope, key string, r rec) {
	if u.Scopes[scope] == nil {
		u.Scopes[scope] = map[string]rec{}
	}
	u.Scopes[scope][key] = r
}

// evict drops the records of entries expired at now (Unix nanoseconds).
func evict(u *usage, now int64) {
	for s, recs := range u.Scopes {
		for k, r := range recs {
			if r.Expires <= now {
				delete(recs, k)
			}
		}
		if len(recs) == 0 {
			delete(u.Scopes, s)
		}
	}
}
