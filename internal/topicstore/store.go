package topicstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Entry is a message queued for a subscription, with its delivery state.
type Entry = agentsilov1.TopicEntry

// DeadLetter is a message a subscription gave up on.
type DeadLetter = agentsilov1.DeadLetter

// SubscriptionRecord is a subscription as a Store keeps it.
type SubscriptionRecord = agentsilov1.SubscriptionRecord

// Store keeps subscriptions, their queues and their dead letters durably:
// EtcdStore in a cluster, JetStreamStore in a cluster whose topics are kept
// in NATS JetStream, a twin in memory in one process (NewMemory: tests, and
// the default of a topics.Service that a silo did not wire). What the
// topics.Service needs is an ordered
// queue per subscription that Append writes to durably, and a registry of
// subscriptions it can follow.
//
// All methods are safe for concurrent use; the Follow methods call f from
// one goroutine of their own, never concurrently with itself.
type Store interface {
	// Subscribe creates the subscription rec.Id if it does not exist (with
	// rec's pattern and limits; it bumps the version of the pattern's
	// owner, so that a publish that has not seen it fails with StaleError)
	// and adds member. An existing subscription with another pattern is
	// FailedPrecondition. It returns the stored record.
	Subscribe(ctx context.Context, rec *SubscriptionRecord, member string) (*SubscriptionRecord, error)
	// Unsubscribe removes member from subscription id; when it was the last
	// member, the subscription is deleted with its queue and dead letters
	// (and deleted is true). NotFound if member is not in it.
	Unsubscribe(ctx context.Context, id, member string) (deleted bool, err error)
	// SubscribeSession is Subscribe for a client session's subscription:
	// the member lives only while this store's holder does (in etcd, on a
	// lease the store keeps alive), so that a subscription whose session
	// ended with its silo goes away (see Prune) rather than outlive it.
	SubscribeSession(ctx context.Context, rec *SubscriptionRecord, member string) (*SubscriptionRecord, error)
	// Prune deletes subscription id, with its queue and dead letters, if
	// it has no member left (a session's whose lease expired), and reports
	// whether it did.
	Prune(ctx context.Context, id string) (bool, error)
	// FollowRegistry calls f with the registry as it is, then again after
	// each change, until ctx ends; it retries while the store is away.
	FollowRegistry(ctx context.Context, f func(*Registry))
	// Subscriptions reads the subscriptions of owner (those whose id is
	// owner:name) as they are now, not as a follower last saw them: what
	// Subscribe returned is in it.
	Subscriptions(ctx context.Context, owner string) (*Registry, error)

	// Append queues each item's entry on the queues of its subscriptions,
	// in order, and returns once they are durable, provided the version of
	// its owner (Item.Owner; every owner in versions if it has none) is
	// still the one given (0: none yet); if one changed, the error is a
	// *StaleError, and the items not queued are those not Done (a store
	// may queue none). An item whose IdemKey is set and was appended
	// within the window is skipped (Duplicate is set on it, DuplicateOf to
	// the first's message id).
	Append(ctx context.Context, items []*Item, versions map[string]int64) error
	// FollowQueue calls f with the entries of subscription id's queue, in
	// order, then with each entry appended, changed or removed, until ctx
	// ends; it retries while the store is away. An event with Reset set
	// comes first and after each reload: forget what you had.
	FollowQueue(ctx context.Context, id string, f func(QueueEvent))
	// Ack removes acknowledged entries from their subscriptions' queues;
	// keys already gone are no error.
	Ack(ctx context.Context, acks []AckKey) error
	// Update replaces the delivery state of a queued entry, keeping its
	// place; NotFound if it is gone.
	Update(ctx context.Context, id, key string, e *Entry) error
	// Kill moves a queued entry to the dead letters as d (d.Id is the key).
	Kill(ctx context.Context, id, key string, d *DeadLetter) error
	// SetFull marks subscription id's backlog full or not.
	SetFull(ctx context.Context, id string, full bool) error

	// DeadLetters lists subscription id's dead letters after the key after
	// ("" from the first), at most limit; more is true if there are others.
	DeadLetters(ctx context.Context, id, after string, limit int) (ds []*DeadLetter, more bool, err error)
	// Replay queues the dead letters keys (nil: all) again, at the end of
	// the queue, with their attempts reset; it returns how many.
	Replay(ctx context.Context, id string, keys []string) (int, error)
	// Drop deletes the dead letters keys (nil: all); it returns how many.
	Drop(ctx context.Context, id string, keys []string) (int, error)
}

// Item is one message to queue for some subscriptions (see Store.Append).
type Item struct {
	Subs  []string // subscription ids
	Entry *Entry
	// Owner is the owner of its topic: the version Append checks for it
	// (""; all those given).
	Owner string
	// IdemKey, if set, makes the append idempotent within the store's
	// window: the scope (the topic's owner and the publisher) and the
	// caller's key.
	IdemKey string
	// Duplicate is set by Append when IdemKey was seen: nothing was queued,
	// and DuplicateOf is the first's message id.
	Duplicate   bool
	DuplicateOf string
	// Done is set by Append once the item is durable (or a duplicate),
	// also when a later part of the same Append fails.
	Done bool
}

// AckKey names an acknowledged entry: its subscription and key.
type AckKey struct{ Sub, Key string }

// QueueEvent is a change of a queue (see Store.FollowQueue).
type QueueEvent struct {
	Reset bool
	Key   string
	Entry *Entry // nil: the key was removed
	// New is true for an entry appended (or replayed) since the last
	// event, false for a changed one and for those listed after a Reset.
	New bool
}

// StaleError is Append's error when the subscriptions of an owner changed
// since the versions the caller gave: Versions has the versions now; the
// caller waits until its registry has them, and appends again.
type StaleError struct {
	Versions map[string]int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("topics: the subscriptions changed (versions %v)", e.Versions)
}

// ErrStale matches every *StaleError with errors.Is.
var ErrStale = errs.New(codes.Aborted, "topics: stale subscriptions")

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Registry is a snapshot of the subscriptions, as FollowRegistry hands it
// out. It is never changed after that: treat it as read-only.
type Registry struct {
	// Versions holds each owner's subscription version (see Append).
	Versions map[string]int64
	// Subs holds the subscriptions by id.
	Subs map[string]*Sub
	// byOwner lists the subscriptions of each pattern owner, by id.
	byOwner map[string][]*Sub
}

// Sub is a subscription in a Registry.
type Sub struct {
	Record  *SubscriptionRecord
	Pattern Pattern
	Members []string // sorted
	Full    bool     // its backlog is full: publishers wait
	// Session: its members are client sessions (see
	// Service.SubscribeSession).
	Session bool
}

// newRegistry builds a Registry from subscriptions (records and members)
// and versions, indexing it. Subscriptions without a parseable pattern are
// left out.
func newRegistry(versions map[string]int64, recs map[string]*SubscriptionRecord, members map[string][]string, full map[string]bool) *Registry {
	r := &Registry{Versions: versions, Subs: make(map[string]*Sub, len(recs)), byOwner: make(map[string][]*Sub)}
	if r.Versions == nil {
		r.Versions = map[string]int64{}
	}
	for id, rec := range recs {
		p, err := ParsePattern(rec.GetPattern(), "")
		if err != nil {
			continue
		}
		ms := append([]string(nil), members[id]...)
		sort.Strings(ms)
		s := &Sub{Record: rec, Pattern: p, Members: ms, Full: full[id], Session: len(ms) > 0}
		for _, m := range ms {
			if !IsSession(m) {
				s.Session = false
			}
		}
		r.Subs[id] = s
		r.byOwner[p.Owner] = append(r.byOwner[p.Owner], s)
	}
	for _, l := range r.byOwner {
		sort.Slice(l, func(i, j int) bool { return l[i].Record.GetId() < l[j].Record.GetId() })
	}
	return r
}

// Matching returns the subscriptions whose pattern matches t, by id.
func (r *Registry) Matching(t Topic) []*Sub {
	var out []*Sub
	for _, s := range r.byOwner[t.Owner] {
		if s.Pattern.Match(t) {
			out = append(out, s)
		}
	}
	return out
}

// Owned returns the subscriptions whose id starts with owner + ":".
func (r *Registry) Owned(owner string) []*Sub {
	var out []*Sub
	for id, s := range r.Subs {
		if len(id) > len(owner) && id[len(owner)] == ':' && id[:len(owner)] == owner {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Record.GetId() < out[j].Record.GetId() })
	return out
}

// DefaultIdemWindow is how long an idempotency key is remembered.
const DefaultIdemWindow = 10 * time.Minute

// IsSession reports whether addr is a client session's address.
func IsSession(addr string) bool {
	return len(addr) > len(grain.SessionType) && addr[len(grain.SessionType)] == ':' && addr[:len(grain.SessionType)] == grain.SessionType
}
