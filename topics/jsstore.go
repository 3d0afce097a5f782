package topics

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// JetStreamStore is a Store on NATS JetStream, for clusters whose
// publishing outgrows etcd. It keeps four key-value buckets (JetStream
// streams with one message per subject), named from Config.Bucket:
//
//	<bucket>_reg   s.<id>            a subscription (SubscriptionRecord)
//	               m.<id>.<member>   one of its members
//	               v.<owner>         put when a subscription to the owner's
//	                                 topics comes or goes: its revision (the
//	                                 stream sequence) is the version every
//	                                 Append compares
//	               f.<id>            present while the backlog is full
//	<bucket>_q     <id>.<key>        a queued message (TopicEntry); an
//	               <id>._reset       acknowledgement is a delete marker;
//	                                 _reset tells followers the queue was
//	                                 purged with its subscription
//	<bucket>_dead  <id>.<key>        a dead letter (DeadLetter)
//	<bucket>_idem  <hash>            an idempotency key's first message id,
//	                                 kept for the window (the stream's age)
//	<bucket>_live  <holder>          a store's heartbeat, put every third of
//	                                 SessionTTL, kept for SessionTTL (the
//	                                 stream's age)
//
// Ids, members and owners are written base64url-encoded: a key's tokens
// are NATS subject tokens. A queue's keys are hexadecimal: this process's
// clock in nanoseconds (never less than the previous key's plus one) and
// a random suffix per store, so a queue's order after a reload, sorted by
// key, is the order its entries were appended in from one process, and
// their order in time from several.
//
// JetStream has no transaction over several keys: Append reads the
// owners' versions, then writes the copies (one stream message each, all
// in flight at once on the connection, so in order), each with a message
// id derived from the idempotency key when there is one, which the
// stream's duplicate window (the idempotency window) turns into a no-op
// when written again. A publish that started after Subscribe returned
// sees the new version, as with etcd; one that read the versions just
// before an Unsubscribe may leave copies in the deleted queue, which a
// later subscription of the same id would find.
//
// A session's member (SubscribeSession) names its holder, the store that
// subscribed it: while the holder's heartbeat lives, so does the member;
// once it has expired, any store's sweep deletes the member, and the
// subscription without members is pruned by its owner (Prune). A holder
// that finds its own heartbeat expired (it was away from NATS for longer
// than SessionTTL) writes its members again.
type JetStreamStore struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	ownsNC bool
	cfg    JetStreamConfig
	logger *slog.Logger

	reg, q, dead, idem, live jetstream.KeyValue
	deadStream               jetstream.Stream
	qStream                  jetstream.Stream

	keySuffix string
	keyMu     sync.Mutex
	keyLast   int64

	writes atomic.Uint64 // stream messages written, for the figures

	heldMu sync.Mutex
	held   map[string]bool // the session members this store holds, by reg key

	// reconnected is closed (and replaced) when the connection comes back:
	// the followers watch again at once rather than wait for their
	// consumers to notice.
	reconnMu    sync.Mutex
	reconnected chan struct{}

	followMu sync.Mutex
	followed map[string]int // the queues followed here (the sweeper sweeps them), by id

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// JetStreamConfig configures a JetStreamStore.
type JetStreamConfig struct {
	// URL is the NATS server (or several, comma-separated):
	// nats://[user:password@]host:port. OpenJetStream dials it.
	URL string
	// CredsFile is a NATS credentials file (a user JWT and its NKey seed),
	// if the server wants one.
	CredsFile string
	// CAFile, CertFile and KeyFile: the CA the server's certificate must
	// chain to, and this client's certificate and key (mutual TLS), PEM.
	CAFile, CertFile, KeyFile string
	// Bucket names the store's buckets (<Bucket>_reg, _q, _dead, _idem):
	// letters, digits, - and _. Default "agentsilo_topics".
	Bucket string
	// Replicas of each bucket in a JetStream cluster. Default 1.
	Replicas int
	// OpTimeout bounds each request to the server. Default 5 s.
	OpTimeout time.Duration
	// Window is how long an idempotency key is remembered. Default 10 min.
	Window time.Duration
	// SweepEvery is how often the store removes the delete markers of
	// acknowledged entries older than MarkerAge, in the queues it follows
	// (those of the subscriptions its silo delivers). Default 1 min and
	// 1 min: a follower further behind than MarkerAge may deliver such an
	// entry once more.
	SweepEvery, MarkerAge time.Duration
	// SessionTTL is how long the session members this store holds outlive
	// it (see SubscribeSession). Default 15 s.
	SessionTTL time.Duration
}

// DefaultJetStreamConfig returns the defaults, for url.
func DefaultJetStreamConfig(url string) JetStreamConfig {
	return JetStreamConfig{
		URL:        url,
		Bucket:     "agentsilo_topics",
		Replicas:   1,
		OpTimeout:  5 * time.Second,
		Window:     DefaultIdemWindow,
		SweepEvery: time.Minute,
		MarkerAge:  time.Minute,
		SessionTTL: 15 * time.Second,
	}
}

var bucketName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Validate reports what is wrong with c, as InvalidArgument.
func (c JetStreamConfig) Validate() error {
	switch {
	case !bucketName.MatchString(c.Bucket):
		return errs.New(codes.InvalidArgument, "topics: JetStream bucket %q: use letters, digits, - and _", c.Bucket)
	case c.Replicas < 1 || c.Replicas > 5:
		return errs.New(codes.InvalidArgument, "topics: JetStream replicas %d: use 1 to 5", c.Replicas)
	case c.OpTimeout <= 0, c.Window <= 0, c.SweepEvery <= 0, c.MarkerAge < 0, c.SessionTTL < time.Second:
		return errs.New(codes.InvalidArgument, "topics: JetStream OpTimeout, Window and SweepEvery must be positive, SessionTTL at least 1 s")
	case (c.CertFile == "") != (c.KeyFile == ""):
		return errs.New(codes.InvalidArgument, "topics: JetStream TLS needs both a certificate and its key")
	}
	return nil
}

// OpenJetStream dials cfg.URL (reconnecting forever once connected) and
// returns the store on it, its buckets created if missing. Close closes
// the connection.
func OpenJetStream(ctx context.Context, cfg JetStreamConfig, logger *slog.Logger) (*JetStreamStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	opts := []nats.Option{
		nats.Name("agentsilo topics"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(cfg.OpTimeout),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("topics: lost the NATS server; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("topics: reconnected to the NATS server", "url", nc.ConnectedUrlRedacted())
		}),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.CAFile))
	}
	if cfg.CertFile != "" {
		opts = append(opts, nats.ClientCert(cfg.CertFile, cfg.KeyFile))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, errs.Wrap(codes.Unavailable, err, "topics: connect to NATS at %s", RedactURLs(cfg.URL))
	}
	s, err := NewJetStreamStore(ctx, nc, cfg, logger)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownsNC = true
	return s, nil
}

// RedactURLs returns urls (comma-separated) with their passwords hidden.
func RedactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		p, err := neturl.Parse(strings.TrimSpace(u))
		if err != nil {
			parts[i] = "(an unparseable URL)"
			continue
		}
		parts[i] = p.Redacted()
	}
	return strings.Join(parts, ",")
}

// NewJetStreamStore returns the store on nc (cfg.URL and the credentials
// are not used), its buckets created if missing. Close leaves nc open.
func NewJetStreamStore(ctx context.Context, nc *nats.Conn, cfg JetStreamConfig, logger *slog.Logger) (*JetStreamStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, errs.Wrap(codes.Unavailable, err, "topics: JetStream")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := &JetStreamStore{js: js, nc: nc, cfg: cfg, logger: logger, keySuffix: hex.EncodeToString(b[:]), reconnected: make(chan struct{}), held: map[string]bool{}, followed: map[string]int{}}
	octx, cancel := context.WithTimeout(ctx, 4*cfg.OpTimeout)
	defer cancel()
	if s.reg, _, err = s.bucket(octx, "reg", 0, 0); err != nil {
		return nil, err
	}
	if s.q, s.qStream, err = s.bucket(octx, "q", 0, cfg.Window); err != nil {
		return nil, err
	}
	if s.dead, s.deadStream, err = s.bucket(octx, "dead", 0, 0); err != nil {
		return nil, err
	}
	if s.idem, _, err = s.bucket(octx, "idem", cfg.Window, 0); err != nil {
		return nil, err
	}
	if s.live, _, err = s.bucket(octx, "live", cfg.SessionTTL, 0); err != nil {
		return nil, err
	}
	if _, err := s.put(octx, s.live, s.keySuffix, nil); err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	status := nc.StatusChanged(nats.CONNECTED)
	s.wg.Add(3)
	go s.sweeper(sctx)
	go s.watchStatus(sctx, status)
	go s.keeper(sctx)
	return s, nil
}

// bucket creates (or updates) the stream of a key-value bucket, as the
// client's own KV creation would, but with reads from the stream's leader
// (no direct gets, which a replica may answer stale), maxAge (0: none) and
// the duplicate window dups (0: the server's), and binds to it.
func (s *JetStreamStore) bucket(ctx context.Context, kind string, maxAge, dups time.Duration) (jetstream.KeyValue, jetstream.Stream, error) {
	name := s.cfg.Bucket + "_" + kind
	if dups == 0 {
		dups = 2 * time.Minute
		if maxAge > 0 && maxAge < dups {
			dups = maxAge
		}
	}
	st, err := s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              "KV_" + name,
		Subjects:          []string{"$KV." + name + ".>"},
		MaxMsgsPerSubject: 1,
		MaxBytes:          -1,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		MaxAge:            maxAge,
		Storage:           jetstream.FileStorage,
		Replicas:          s.cfg.Replicas,
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        dups,
		Discard:           jetstream.DiscardNew,
	})
	if err != nil {
		return nil, nil, s.fail(ctx, err, "create the JetStream bucket %s", name)
	}
	kv, err := s.js.KeyValue(ctx, name)
	if err != nil {
		return nil, nil, s.fail(ctx, err, "open the JetStream bucket %s", name)
	}
	return kv, st, nil
}

// Close stops the sweeper and, if OpenJetStream dialled the connection,
// closes it. Followers end with their contexts.
func (s *JetStreamStore) Close() {
	s.stop()
	s.wg.Wait()
	if s.ownsNC {
		s.nc.Close()
	}
}

var _ Store = (*JetStreamStore)(nil)

// Writes returns how many stream messages the store wrote.
func (s *JetStreamStore) Writes() uint64 { return s.writes.Load() }

// fail gives err, from a request made with ctx (or one derived from it),
// its code: the caller's own end is Canceled or DeadlineExceeded, a
// refused or missing key keeps the client's error under FailedPrecondition
// or NotFound, and the rest (no server, no answer, no JetStream) is
// Unavailable.
func (s *JetStreamStore) fail(ctx context.Context, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var e *errs.Error
	switch {
	case errors.As(err, &e):
		return err
	case ctx.Err() != nil:
		return errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), format, args...)
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return errs.Wrap(codes.NotFound, err, format, args...)
	case errors.Is(err, jetstream.ErrKeyExists):
		return errs.Wrap(codes.Aborted, err, format, args...)
	}
	return errs.Wrap(codes.Unavailable, err, "topics: JetStream: "+format, args...)
}

func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func dec(s string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return string(b), err == nil
}

func subK(id string) string            { return "s." + enc(id) }
func memberK(id, member string) string { return "m." + enc(id) + "." + enc(member) }
func verK(owner string) string         { return "v." + enc(owner) }
func fullK(id string) string           { return "f." + enc(id) }
func itemK(id, key string) string      { return enc(id) + "." + key }

const resetKey = "_reset"

// validKey reports whether key can be a queue's or dead letters' key:
// those the store makes are hexadecimal; anything else names nothing.
func validKey(key string) bool {
	if key == "" || len(key) > 64 {
		return false
	}
	for _, c := range key {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (s *JetStreamStore) newKey() string {
	s.keyMu.Lock()
	n := max(time.Now().UnixNano(), s.keyLast+1)
	s.keyLast = n
	s.keyMu.Unlock()
	return fmt.Sprintf("%016x%s", n, s.keySuffix)
}

func (s *JetStreamStore) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.OpTimeout)
}

// get reads key of kv; found is false if it is absent.
func (s *JetStreamStore) get(ctx context.Context, kv jetstream.KeyValue, key string) (e jetstream.KeyValueEntry, found bool, err error) {
	octx, cancel := s.op(ctx)
	defer cancel()
	e, err = kv.Get(octx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.fail(ctx, err, "read %s", key)
	}
	return e, true, nil
}

func (s *JetStreamStore) put(ctx context.Context, kv jetstream.KeyValue, key string, val []byte) (uint64, error) {
	octx, cancel := s.op(ctx)
	defer cancel()
	rev, err := kv.Put(octx, key, val)
	if err != nil {
		return 0, s.fail(ctx, err, "write %s", key)
	}
	s.writes.Add(1)
	return rev, nil
}

func (s *JetStreamStore) del(ctx context.Context, kv jetstream.KeyValue, key string) error {
	octx, cancel := s.op(ctx)
	defer cancel()
	if err := kv.Delete(octx, key); err != nil {
		return s.fail(ctx, err, "delete %s", key)
	}
	s.writes.Add(1)
	return nil
}

// list reads the entries of kv matching filter as they are now.
func (s *JetStreamStore) list(ctx context.Context, kv jetstream.KeyValue, filter string, metaOnly bool) ([]jetstream.KeyValueEntry, error) {
	octx, cancel := s.op(ctx)
	defer cancel()
	opts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
	if metaOnly {
		opts = append(opts, jetstream.MetaOnly())
	}
	w, err := kv.Watch(octx, filter, opts...)
	if err != nil {
		return nil, s.fail(ctx, err, "list %s", filter)
	}
	defer w.Stop()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, s.fail(ctx, errors.New("the listing ended early"), "list %s", filter)
			}
			if e == nil {
				return out, nil
			}
			out = append(out, e)
		case <-octx.Done():
			return nil, s.fail(ctx, octx.Err(), "list %s", filter)
		}
	}
}

// Subscribe implements Store.
func (s *JetStreamStore) Subscribe(ctx context.Context, rec *SubscriptionRecord, member string) (*SubscriptionRecord, error) {
	return s.subscribe(ctx, rec, member, nil)
}

// subscribe is Subscribe with the member's value: its holder for a
// session's, else nothing.
func (s *JetStreamStore) subscribe(ctx context.Context, rec *SubscriptionRecord, member string, mval []byte) (*SubscriptionRecord, error) {
	p, err := ParsePattern(rec.GetPattern(), "")
	if err != nil {
		return nil, err
	}
	val, err := proto.Marshal(rec)
	if err != nil {
		return nil, errs.New(codes.Internal, "subscribe: %v", err)
	}
	id := rec.GetId()
	for range 16 {
		// The member first: a registry shows it only once its
		// subscription is there, and never shows the subscription
		// without it (which its owner would prune).
		if _, err := s.put(ctx, s.reg, memberK(id, member), mval); err != nil {
			return nil, err
		}
		e, found, err := s.get(ctx, s.reg, subK(id))
		if err != nil {
			return nil, err
		}
		if found {
			cur := &SubscriptionRecord{}
			if err := proto.Unmarshal(e.Value(), cur); err != nil {
				return nil, errs.New(codes.Internal, "subscription %s: unreadable: %v", id, err)
			}
			if cur.GetPattern() != rec.GetPattern() {
				_ = s.del(ctx, s.reg, memberK(id, member))
				return nil, errs.New(codes.FailedPrecondition, "subscription %s exists with pattern %s, not %s", id, cur.GetPattern(), rec.GetPattern())
			}
			// Still the same subscription (not deleted meanwhile by its
			// last member's Unsubscribe)?
			again, found, err := s.get(ctx, s.reg, subK(id))
			if err != nil {
				return nil, err
			}
			if found && again.Revision() == e.Revision() {
				return cur, nil
			}
			continue
		}
		octx, cancel := s.op(ctx)
		_, err = s.reg.Create(octx, subK(id), val)
		cancel()
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return nil, s.fail(ctx, err, "subscribe %s", id)
		}
		s.writes.Add(1)
		if _, err := s.put(ctx, s.reg, verK(p.Owner), nil); err != nil {
			return nil, err
		}
		return proto.Clone(rec).(*SubscriptionRecord), nil
	}
	return nil, errs.New(codes.Aborted, "subscribe %s: too many concurrent changes; retry", id)
}

// SubscribeSession implements Store: the member lives while this store's
// heartbeat does (see JetStreamStore).
func (s *JetStreamStore) SubscribeSession(ctx context.Context, rec *SubscriptionRecord, member string) (*SubscriptionRecord, error) {
	k := memberK(rec.GetId(), member)
	s.heldMu.Lock()
	s.held[k] = true
	s.heldMu.Unlock()
	out, err := s.subscribe(ctx, rec, member, []byte(holderPrefix+s.keySuffix))
	if err != nil {
		s.heldMu.Lock()
		delete(s.held, k)
		s.heldMu.Unlock()
	}
	return out, err
}

const holderPrefix = "holder:"

// members lists the members of subscription id.
func (s *JetStreamStore) members(ctx context.Context, id string) (int, error) {
	es, err := s.list(ctx, s.reg, "m."+enc(id)+".*", true)
	return len(es), err
}

// Unsubscribe implements Store.
func (s *JetStreamStore) Unsubscribe(ctx context.Context, id, member string) (bool, error) {
	s.heldMu.Lock()
	delete(s.held, memberK(id, member))
	s.heldMu.Unlock()
	_, found, err := s.get(ctx, s.reg, memberK(id, member))
	if err != nil {
		return false, err
	}
	if !found {
		return false, errs.New(codes.NotFound, "%s is not subscribed to %s", member, id)
	}
	if err := s.del(ctx, s.reg, memberK(id, member)); err != nil {
		return false, err
	}
	return s.Prune(ctx, id)
}

// Prune implements Store.
func (s *JetStreamStore) Prune(ctx context.Context, id string) (bool, error) {
	e, found, err := s.get(ctx, s.reg, subK(id))
	if err != nil || !found {
		return false, err
	}
	if n, err := s.members(ctx, id); err != nil || n > 0 {
		return false, err
	}
	rec := &SubscriptionRecord{}
	if err := proto.Unmarshal(e.Value(), rec); err != nil {
		return false, errs.New(codes.Internal, "subscription %s: unreadable: %v", id, err)
	}
	if err := s.del(ctx, s.reg, subK(id)); err != nil {
		return false, err
	}
	if err := s.del(ctx, s.reg, fullK(id)); err != nil {
		return true, err
	}
	if p, err := ParsePattern(rec.GetPattern(), ""); err == nil {
		if _, err := s.put(ctx, s.reg, verK(p.Owner), nil); err != nil {
			return true, err
		}
	}
	// The queue and the dead letters go without a marker each; the
	// queue's followers learn it from _reset.
	octx, cancel := s.op(ctx)
	defer cancel()
	if err := s.qStream.Purge(octx, jetstream.WithPurgeSubject("$KV."+s.cfg.Bucket+"_q."+enc(id)+".*")); err != nil {
		return true, s.fail(ctx, err, "purge the queue of %s", id)
	}
	if _, err := s.put(ctx, s.q, itemK(id, resetKey), nil); err != nil {
		return true, err
	}
	if err := s.deadStream.Purge(octx, jetstream.WithPurgeSubject("$KV."+s.cfg.Bucket+"_dead."+enc(id)+".*")); err != nil {
		return true, s.fail(ctx, err, "purge the dead letters of %s", id)
	}
	return true, nil
}

// regState is the registry being read from the bucket.
type regState struct {
	versions map[string]int64
	recs     map[string]*SubscriptionRecord
	members  map[string]map[string]bool
	full     map[string]bool
}

func newRegState() *regState {
	return &regState{versions: map[string]int64{}, recs: map[string]*SubscriptionRecord{}, members: map[string]map[string]bool{}, full: map[string]bool{}}
}

func (r *regState) apply(e jetstream.KeyValueEntry) {
	put := e.Operation() == jetstream.KeyValuePut
	kind, rest, _ := strings.Cut(e.Key(), ".")
	switch kind {
	case "s":
		id, ok := dec(rest)
		if !ok {
			return
		}
		if !put {
			delete(r.recs, id)
			return
		}
		rec := &SubscriptionRecord{}
		if proto.Unmarshal(e.Value(), rec) == nil {
			r.recs[id] = rec
		}
	case "m":
		a, b, _ := strings.Cut(rest, ".")
		id, ok1 := dec(a)
		m, ok2 := dec(b)
		if !ok1 || !ok2 {
			return
		}
		if put {
			if r.members[id] == nil {
				r.members[id] = map[string]bool{}
			}
			r.members[id][m] = true
		} else if ms := r.members[id]; ms != nil {
			delete(ms, m)
			if len(ms) == 0 {
				delete(r.members, id)
			}
		}
	case "v":
		if o, ok := dec(rest); ok && put {
			r.versions[o] = int64(e.Revision())
		}
	case "f":
		if id, ok := dec(rest); ok {
			if put {
				r.full[id] = true
			} else {
				delete(r.full, id)
			}
		}
	}
}

// registry builds a Registry of the subscriptions whose id keep accepts
// (nil: all).
func (r *regState) registry(keep func(id string) bool) *Registry {
	versions := make(map[string]int64, len(r.versions))
	for o, v := range r.versions {
		versions[o] = v
	}
	recs := make(map[string]*SubscriptionRecord, len(r.recs))
	members := make(map[string][]string, len(r.recs))
	full := make(map[string]bool, len(r.full))
	for id, rec := range r.recs {
		if keep != nil && !keep(id) {
			continue
		}
		recs[id] = rec
		for m := range r.members[id] {
			members[id] = append(members[id], m)
		}
		full[id] = r.full[id]
	}
	return NewRegistry(versions, recs, members, full)
}

// FollowRegistry implements Store.
func (s *JetStreamStore) FollowRegistry(ctx context.Context, f func(*Registry)) {
	b := retry.New(100*time.Millisecond, 5*time.Second, nil)
	for {
		err := s.followRegistry(ctx, f, b)
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("topics: following the registry in JetStream; again", "err", err)
		if !b.Wait(ctx, nil) {
			return
		}
	}
}

func (s *JetStreamStore) followRegistry(ctx context.Context, f func(*Registry), b *retry.Backoff) error {
	reconn := s.reconnect()
	w, err := s.reg.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	r, loaded := newRegState(), false
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch ended")
			}
			if e == nil {
				loaded = true
				b.Reset()
				f(r.registry(nil))
				continue
			}
			r.apply(e)
			if !loaded {
				continue
			}
			// Take what else has come, then hand out one registry.
		more:
			for {
				select {
				case e, ok := <-w.Updates():
					if !ok {
						return errors.New("the watch ended")
					}
					if e != nil {
						r.apply(e)
					}
				default:
					break more
				}
			}
			f(r.registry(nil))
		case <-reconn:
			return errors.New("reconnected")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Subscriptions implements Store.
func (s *JetStreamStore) Subscriptions(ctx context.Context, owner string) (*Registry, error) {
	es, err := s.list(ctx, s.reg, ">", false)
	if err != nil {
		return nil, err
	}
	r := newRegState()
	for _, e := range es {
		r.apply(e)
	}
	return r.registry(func(id string) bool { o, _, _ := strings.Cut(id, ":"); return o == owner }), nil
}

// idemK is the idempotency bucket's key of k.
func idemK(k string) string {
	h := sha256.Sum256([]byte(k))
	return hex.EncodeToString(h[:16])
}

// publish writes msgs asynchronously (in order, on one connection) and
// waits for each one's acknowledgement; ok[i] tells whether msgs[i] is
// durable.
func (s *JetStreamStore) publish(ctx context.Context, msgs []*nats.Msg, ids []string) (ok []bool, err error) {
	ok = make([]bool, len(msgs))
	futs := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		var opts []jetstream.PublishOpt
		if ids[i] != "" {
			opts = append(opts, jetstream.WithMsgID(ids[i]))
		}
		f, err := s.js.PublishMsgAsync(m, opts...)
		if err != nil {
			return ok, s.fail(ctx, err, "write %s", m.Subject)
		}
		futs[i] = f
	}
	t := time.NewTimer(s.cfg.OpTimeout)
	defer t.Stop()
	for i, f := range futs {
		select {
		case <-f.Ok():
			ok[i] = true
			s.writes.Add(1)
		case e := <-f.Err():
			if err == nil {
				err = s.fail(ctx, e, "write %s", msgs[i].Subject)
			}
		case <-t.C:
			return ok, s.fail(ctx, errors.New("no acknowledgement in time"), "write %s", msgs[i].Subject)
		case <-ctx.Done():
			return ok, s.fail(ctx, ctx.Err(), "write %s", msgs[i].Subject)
		}
	}
	return ok, err
}

func (s *JetStreamStore) qSubject(id, key string) string {
	return "$KV." + s.cfg.Bucket + "_q." + itemK(id, key)
}

// Append implements Store.
func (s *JetStreamStore) Append(ctx context.Context, items []*Item, versions map[string]int64) error {
	if err := ctx.Err(); err != nil {
		return errs.Wrap(errs.Code(err), err, "append")
	}
	var stale bool
	cur := make(map[string]int64, len(versions))
	for o, v := range versions {
		e, found, err := s.get(ctx, s.reg, verK(o))
		if err != nil {
			return err
		}
		if found {
			cur[o] = int64(e.Revision())
		}
		if cur[o] != v {
			stale = true
		}
	}
	if stale {
		return &StaleError{Versions: cur}
	}
	var msgs []*nats.Msg
	var ids []string
	owner := make([]int, 0, len(items)) // the item of each message
	for i, it := range items {
		if it.IdemKey != "" {
			e, found, err := s.get(ctx, s.idem, idemK(it.IdemKey))
			if err != nil {
				return err
			}
			if found && string(e.Value()) != it.Entry.GetMessage().GetId() {
				it.Duplicate, it.DuplicateOf, it.Done = true, string(e.Value()), true
				continue
			}
		}
		b, err := proto.Marshal(it.Entry)
		if err != nil {
			return errs.New(codes.Internal, "append: %v", err)
		}
		for _, id := range it.Subs {
			msgs = append(msgs, &nats.Msg{Subject: s.qSubject(id, s.newKey()), Data: b})
			mid := ""
			if it.IdemKey != "" {
				mid = idemK(it.IdemKey) + "." + enc(id)
			}
			ids = append(ids, mid)
			owner = append(owner, i)
		}
	}
	ok, err := s.publish(ctx, msgs, ids)
	done := make([]bool, len(items))
	for i := range done {
		done[i] = true
	}
	for j, i := range owner {
		if !ok[j] {
			done[i] = false
		}
	}
	for i, it := range items {
		if !done[i] || it.Duplicate {
			continue
		}
		if it.IdemKey != "" {
			octx, cancel := s.op(ctx)
			_, cerr := s.idem.Create(octx, idemK(it.IdemKey), []byte(it.Entry.GetMessage().GetId()))
			cancel()
			if errors.Is(cerr, jetstream.ErrKeyExists) {
				// Another publish with the key wrote first: its copies
				// were the ones kept (the same message ids).
				if e, found, gerr := s.get(ctx, s.idem, idemK(it.IdemKey)); gerr == nil && found && string(e.Value()) != it.Entry.GetMessage().GetId() {
					it.Duplicate, it.DuplicateOf = true, string(e.Value())
				}
			} else if cerr != nil {
				if err == nil {
					err = s.fail(ctx, cerr, "remember the idempotency key")
				}
				continue
			}
		}
		it.Done = true
	}
	return err
}

// FollowQueue implements Store.
func (s *JetStreamStore) FollowQueue(ctx context.Context, id string, f func(QueueEvent)) {
	s.followMu.Lock()
	s.followed[id]++
	s.followMu.Unlock()
	defer func() {
		s.followMu.Lock()
		if s.followed[id]--; s.followed[id] == 0 {
			delete(s.followed, id)
		}
		s.followMu.Unlock()
	}()
	b := retry.New(100*time.Millisecond, 5*time.Second, nil)
	for {
		err := s.followQueue(ctx, id, f, b)
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("topics: following a queue in JetStream; again", "subscription", id, "err", err)
		if !b.Wait(ctx, nil) {
			return
		}
	}
}

func (s *JetStreamStore) followQueue(ctx context.Context, id string, f func(QueueEvent), b *retry.Backoff) error {
	reconn := s.reconnect()
	w, err := s.q.Watch(ctx, enc(id)+".*")
	if err != nil {
		return err
	}
	defer w.Stop()
	pre := len(enc(id)) + 1
	initial := map[string]*Entry{}
	var live map[string]bool // the keys present, once loaded
	for {
		var e jetstream.KeyValueEntry
		select {
		case x, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch ended")
			}
			e = x
		case <-reconn:
			return errors.New("reconnected")
		case <-ctx.Done():
			return ctx.Err()
		}
		if e == nil {
			// Loaded: hand out the queue in its keys' order.
			b.Reset()
			keys := make([]string, 0, len(initial))
			for k := range initial {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			f(QueueEvent{Reset: true})
			live = make(map[string]bool, len(keys))
			for _, k := range keys {
				live[k] = true
				f(QueueEvent{Key: k, Entry: initial[k]})
			}
			initial = nil
			continue
		}
		key := e.Key()[pre:]
		put := e.Operation() == jetstream.KeyValuePut
		if key == resetKey {
			if live != nil && put {
				live = map[string]bool{}
				f(QueueEvent{Reset: true})
			}
			continue
		}
		var en *Entry
		if put {
			en = &Entry{}
			if err := proto.Unmarshal(e.Value(), en); err != nil {
				s.logger.Warn("topics: an unreadable queued entry, skipped", "subscription", id, "key", key, "err", err)
				continue
			}
		}
		if live == nil {
			if put {
				initial[key] = en
			} else {
				delete(initial, key)
			}
			continue
		}
		if !put {
			if live[key] {
				delete(live, key)
				f(QueueEvent{Key: key})
			}
			continue
		}
		isNew := !live[key]
		live[key] = true
		f(QueueEvent{Key: key, Entry: en, New: isNew})
	}
}

// Ack implements Store: a delete marker per entry, all in flight at once.
func (s *JetStreamStore) Ack(ctx context.Context, acks []AckKey) error {
	msgs := make([]*nats.Msg, 0, len(acks))
	for _, a := range acks {
		if !validKey(a.Key) {
			continue
		}
		m := nats.NewMsg(s.qSubject(a.Sub, a.Key))
		m.Header.Set("KV-Operation", "DEL")
		msgs = append(msgs, m)
	}
	_, err := s.publish(ctx, msgs, make([]string, len(msgs)))
	return err
}

// Update implements Store.
func (s *JetStreamStore) Update(ctx context.Context, id, key string, e *Entry) error {
	if !validKey(key) {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	b, err := proto.Marshal(e)
	if err != nil {
		return errs.New(codes.Internal, "update: %v", err)
	}
	for range 16 {
		cur, found, err := s.get(ctx, s.q, itemK(id, key))
		if err != nil {
			return err
		}
		if !found {
			return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
		}
		octx, cancel := s.op(ctx)
		_, err = s.q.Update(octx, itemK(id, key), b, cur.Revision())
		cancel()
		if err == nil {
			s.writes.Add(1)
			return nil
		}
		var apiErr *jetstream.APIError
		if !errors.Is(err, jetstream.ErrKeyExists) && !(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
			return s.fail(ctx, err, "update %s %s", id, key)
		}
	}
	return errs.New(codes.Aborted, "update %s %s: too many concurrent changes; retry", id, key)
}

// Kill implements Store.
func (s *JetStreamStore) Kill(ctx context.Context, id, key string, d *DeadLetter) error {
	if !validKey(key) {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	_, found, err := s.get(ctx, s.q, itemK(id, key))
	if err != nil {
		return err
	}
	if !found {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	d = proto.Clone(d).(*DeadLetter)
	d.Id = key
	b, err := proto.Marshal(d)
	if err != nil {
		return errs.New(codes.Internal, "dead letter: %v", err)
	}
	if _, err := s.put(ctx, s.dead, itemK(id, key), b); err != nil {
		return err
	}
	return s.del(ctx, s.q, itemK(id, key))
}

// SetFull implements Store.
func (s *JetStreamStore) SetFull(ctx context.Context, id string, full bool) error {
	if _, found, err := s.get(ctx, s.reg, subK(id)); err != nil || !found {
		return err
	}
	_, is, err := s.get(ctx, s.reg, fullK(id))
	if err != nil || is == full {
		return err
	}
	if full {
		_, err = s.put(ctx, s.reg, fullK(id), nil)
		return err
	}
	return s.del(ctx, s.reg, fullK(id))
}

// deadLetters reads subscription id's dead letters, by key.
func (s *JetStreamStore) deadLetters(ctx context.Context, id string) ([]*DeadLetter, error) {
	es, err := s.list(ctx, s.dead, enc(id)+".*", false)
	if err != nil {
		return nil, err
	}
	out := make([]*DeadLetter, 0, len(es))
	for _, e := range es {
		d := &DeadLetter{}
		if err := proto.Unmarshal(e.Value(), d); err != nil {
			continue
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out, nil
}

// DeadLetters implements Store. It reads all of the subscription's dead
// letters for each page: a subscription's dead letters are meant to be
// few, looked at, replayed or dropped.
func (s *JetStreamStore) DeadLetters(ctx context.Context, id, after string, limit int) ([]*DeadLetter, bool, error) {
	all, err := s.deadLetters(ctx, id)
	if err != nil {
		return nil, false, err
	}
	var out []*DeadLetter
	for _, d := range all {
		if d.GetId() <= after {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, d)
	}
	return out, false, nil
}

// chosen returns the dead letters of id named by keys (nil: all).
func (s *JetStreamStore) chosen(ctx context.Context, id string, keys []string) ([]*DeadLetter, error) {
	all, err := s.deadLetters(ctx, id)
	if err != nil || keys == nil {
		return all, err
	}
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	var out []*DeadLetter
	for _, d := range all {
		if want[d.GetId()] {
			out = append(out, d)
		}
	}
	return out, nil
}

func (s *JetStreamStore) dropDead(ctx context.Context, id, key string) error {
	octx, cancel := s.op(ctx)
	defer cancel()
	if err := s.deadStream.Purge(octx, jetstream.WithPurgeSubject("$KV."+s.cfg.Bucket+"_dead."+itemK(id, key))); err != nil {
		return s.fail(ctx, err, "drop the dead letter %s of %s", key, id)
	}
	s.writes.Add(1)
	return nil
}

// Replay implements Store.
func (s *JetStreamStore) Replay(ctx context.Context, id string, keys []string) (int, error) {
	ds, err := s.chosen(ctx, id, keys)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range ds {
		b, err := proto.Marshal(&Entry{Message: d.GetMessage()})
		if err != nil {
			return n, errs.New(codes.Internal, "replay: %v", err)
		}
		if _, err := s.put(ctx, s.q, itemK(id, s.newKey()), b); err != nil {
			return n, err
		}
		if err := s.dropDead(ctx, id, d.GetId()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Drop implements Store.
func (s *JetStreamStore) Drop(ctx context.Context, id string, keys []string) (int, error) {
	ds, err := s.chosen(ctx, id, keys)
	if err != nil {
		return 0, err
	}
	for i, d := range ds {
		if err := s.dropDead(ctx, id, d.GetId()); err != nil {
			return i, err
		}
	}
	return len(ds), nil
}

// watchStatus closes reconnected at each reconnection.
func (s *JetStreamStore) watchStatus(ctx context.Context, status <-chan nats.Status) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-status:
		}
		s.reconnMu.Lock()
		close(s.reconnected)
		s.reconnected = make(chan struct{})
		s.reconnMu.Unlock()
	}
}

func (s *JetStreamStore) reconnect() <-chan struct{} {
	s.reconnMu.Lock()
	defer s.reconnMu.Unlock()
	return s.reconnected
}

// keeper puts this store's heartbeat every third of SessionTTL (and its
// session members again if the heartbeat had expired), and deletes, every
// SessionTTL, the session members whose holder's heartbeat has expired.
func (s *JetStreamStore) keeper(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SessionTTL / 3)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.beat(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("topics: the JetStream store's heartbeat", "err", err)
		}
		if n%3 == 0 {
			if err := s.expireSessions(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("topics: removing the members of expired sessions from JetStream", "err", err)
			}
		}
	}
}

// beat puts the heartbeat; if it had expired, it puts the held session
// members again (another store may have deleted them meanwhile).
func (s *JetStreamStore) beat(ctx context.Context) error {
	_, alive, err := s.get(ctx, s.live, s.keySuffix)
	if err != nil {
		return err
	}
	if _, err := s.put(ctx, s.live, s.keySuffix, nil); err != nil {
		return err
	}
	if alive {
		return nil
	}
	s.heldMu.Lock()
	keys := make([]string, 0, len(s.held))
	for k := range s.held {
		keys = append(keys, k)
	}
	s.heldMu.Unlock()
	for _, k := range keys {
		if _, err := s.put(ctx, s.reg, k, []byte(holderPrefix+s.keySuffix)); err != nil {
			return err
		}
	}
	return nil
}

// expireSessions deletes the session members whose holder's heartbeat has
// expired.
func (s *JetStreamStore) expireSessions(ctx context.Context) error {
	es, err := s.list(ctx, s.reg, "m.*.*", false)
	if err != nil {
		return err
	}
	alive := map[string]bool{}
	for _, e := range es {
		h, ok := strings.CutPrefix(string(e.Value()), holderPrefix)
		if !ok {
			continue
		}
		a, known := alive[h]
		if !known {
			_, a, err = s.get(ctx, s.live, h)
			if err != nil {
				return err
			}
			alive[h] = a
		}
		if !a {
			// Unless its holder put it again meanwhile.
			octx, cancel := s.op(ctx)
			err := s.reg.Delete(octx, e.Key(), jetstream.LastRevision(e.Revision()))
			cancel()
			var apiErr *jetstream.APIError
			if err != nil && !(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
				return s.fail(ctx, err, "delete %s", e.Key())
			}
		}
	}
	return nil
}

// sweeper removes, every SweepEvery, the delete markers of acknowledged
// entries older than MarkerAge in the queues followed here: each queue's
// by the silo that delivers it, not by every silo.
func (s *JetStreamStore) sweeper(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.followMu.Lock()
		ids := make([]string, 0, len(s.followed))
		for id := range s.followed {
			ids = append(ids, id)
		}
		s.followMu.Unlock()
		for _, id := range ids {
			if err := s.sweep(ctx, id); err != nil && ctx.Err() == nil {
				s.logger.Warn("topics: removing acknowledged entries' markers from JetStream", "subscription", id, "err", err)
			}
		}
	}
}

// sweep removes the delete markers of subscription id's queue older than
// MarkerAge.
func (s *JetStreamStore) sweep(ctx context.Context, id string) error {
	octx, cancel := s.op(ctx)
	defer cancel()
	w, err := s.q.Watch(octx, enc(id)+".*", jetstream.MetaOnly())
	if err != nil {
		return s.fail(ctx, err, "list the markers of %s", id)
	}
	defer w.Stop()
	var old []string
	limit := time.Now().Add(-s.cfg.MarkerAge)
	for done := false; !done; {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return s.fail(ctx, errors.New("the listing ended early"), "list the markers of %s", id)
			case e == nil:
				done = true
			case e.Operation() != jetstream.KeyValuePut && !e.Created().After(limit):
				old = append(old, e.Key())
			}
		case <-octx.Done():
			return s.fail(ctx, octx.Err(), "list the markers of %s", id)
		}
	}
	for _, k := range old {
		if err := s.qStream.Purge(octx, jetstream.WithPurgeSubject("$KV."+s.cfg.Bucket+"_q."+k)); err != nil {
			return s.fail(ctx, err, "remove the marker %s", k)
		}
	}
	return nil
}
