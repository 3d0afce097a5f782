package topicstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	neturl "net/url"
	"regexp"
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
// publishing outgrows etcd. Each topic owner's messages are a subject of
// one stream, <bucket>_log, and each subscription a durable consumer of it
// (see jslog.go); beside it, five key-value buckets (JetStream streams with
// one message per subject), named from Config.Bucket:
//
//	<bucket>_reg   s.<id>            a subscription (SubscriptionRecord)
//	               m.<id>.<member>   one of its members
//	               v.<owner>         put when a subscription to the owner's
//	                                 topics comes or goes: its revision (the
//	                                 stream sequence) is the version every
//	                                 Append compares
//	               f.<id>            present while the backlog is full
//	<bucket>_q     <id>.<key>        an entry a subscription holds apart from
//	               <id>._reset       the log (retried, replayed, or queued by
//	                                 the layout before the log: TopicEntry);
//	                                 its acknowledgement is a delete marker;
//	                                 _reset tells followers the queue was
//	                                 purged with its subscription
//	<bucket>_dead  <id>.<key>        a dead letter (DeadLetter)
//	<bucket>_idem  <hash>            the id of the message kept for an
//	                                 idempotency key, kept for the window
//	                                 (the stream's age)
//	<bucket>_live  <holder>          a store's heartbeat, put every third of
//	                                 SessionTTL, kept for SessionTTL (the
//	                                 stream's age)
//
// Ids, members and owners are written base64url-encoded: a key's tokens
// are NATS subject tokens. A log message's key is its stream sequence in
// hexadecimal; a held entry's, made here, this process's clock in
// nanoseconds (never less than the previous key's plus one) and a random
// suffix per store, so held entries sorted by key are in the order they
// were put from one process, and in their order in time from several.
//
// JetStream has no transaction over several keys: Append reads the
// owners' versions, then writes the messages (all in flight at once on
// the connection, so in order), each with a message id derived from the
// idempotency key when there is one, which the stream's duplicate window
// (the idempotency window) turns into a no-op when written again: its
// acknowledgement says Duplicate, with the sequence of the message kept,
// whose id the append answers (and writes under the key in <bucket>_idem),
// so that the publisher's id is the one its subscribers get. A
// publish that started after Subscribe returned sees the new version, as
// with etcd.
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
	log                      jetstream.Stream // the log stream (jslog.go)
	qStream                  jetstream.Stream

	keySuffix string
	keyMu     sync.Mutex
	keyLast   int64

	writes atomic.Uint64 // stream messages written, for the figures

	decoded decodeCache // log messages decoded, shared by the queues followed

	heldMu sync.Mutex
	held   map[string]bool // the session members this store holds, by reg key

	// reconnected is closed (and replaced) when the connection comes back:
	// the followers watch again at once rather than wait for their
	// consumers to notice.
	reconnMu    sync.Mutex
	reconnected chan struct{}

	followMu     sync.Mutex
	followed     map[string]int         // the queues followed here (the sweeper sweeps them), by id
	logFollowers map[string]*jsFollower // their log messages held, by id

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
	// AckWait is how long the server waits for a log message's
	// acknowledgement before delivering it again (to whichever store
	// follows its subscription then: a failover takes up to AckWait for the
	// messages the silo gone held). It is set on a subscription's
	// consumer when it is made. Default 30 s.
	AckWait time.Duration
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
		AckWait:    30 * time.Second,
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
	case c.OpTimeout <= 0, c.Window <= 0, c.SweepEvery <= 0, c.MarkerAge < 0, c.SessionTTL < time.Second, c.AckWait < time.Second:
		return errs.New(codes.InvalidArgument, "topics: JetStream OpTimeout, Window and SweepEvery must be positive, SessionTTL and AckWait at least 1 s")
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
	d := &dialer{d: net.Dialer{Timeout: cfg.OpTimeout}}
	opts = append(opts, nats.SetCustomDialer(d))
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		if last := d.lastErr(); last != nil && errors.Is(err, nats.ErrNoServers) {
			// The client says only that no server was reached: say why.
			err = fmt.Errorf("%w (%w)", err, last)
		}
		return nil, errs.Wrap(codes.Unavailable, err, "connect to NATS at %s", RedactURLs(cfg.URL))
	}
	s, err := newJetStreamStore(ctx, nc, cfg, logger)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownsNC = true
	return s, nil
}

// dialer is the NATS client's dialer, remembering its last error: the
// client reports a refused connection as "no servers available" only.
type dialer struct {
	d   net.Dialer
	mu  sync.Mutex
	err error
}

func (d *dialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.d.Dial(network, address)
	if err != nil {
		d.mu.Lock()
		d.err = err
		d.mu.Unlock()
	}
	return c, err
}

func (d *dialer) lastErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
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

// newJetStreamStore returns the store on nc (cfg.URL and the credentials
// are not used), its buckets created if missing. Close leaves nc open.
func newJetStreamStore(ctx context.Context, nc *nats.Conn, cfg JetStreamConfig, logger *slog.Logger) (*JetStreamStore, error) {
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
	s := &JetStreamStore{js: js, nc: nc, cfg: cfg, logger: logger, keySuffix: hex.EncodeToString(b[:]), reconnected: make(chan struct{}), held: map[string]bool{}, followed: map[string]int{}, logFollowers: map[string]*jsFollower{}}
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
	if err := s.createLog(octx); err != nil {
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
		return nil, errs.New(codes.Internal, "subscribe: %w", err)
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
				return nil, errs.New(codes.Internal, "subscription %s: unreadable: %w", id, err)
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
		// Its consumer before its owner's version moves: a publish that
		// sees the new version is past the consumer's start.
		if _, err := s.ensureConsumer(ctx, id, p.Owner); err != nil {
			return nil, err
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
		return false, errs.New(codes.Internal, "subscription %s: unreadable: %w", id, err)
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
	if err := s.deleteConsumer(ctx, id); err != nil {
		return true, err
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
	return newRegistry(versions, recs, members, full)
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
