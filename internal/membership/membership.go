package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// Membership is a silo's membership in the cluster: its record in etcd, its
// gossip group member, and its view of the cluster. Its methods are safe for
// concurrent use.
type Membership struct {
	cfg        Config
	clk        clock.Clock
	started    atomic.Bool
	gossipHost string
	gossipPort int
	log        *slog.Logger
	client     *clientv3.Client
	dir        string // Prefix+"members/"
	key        string // dir+Name
	lease      clientv3.LeaseID
	fenceAfter time.Duration
	self       Member
	ml         *memberlist.Memberlist
	keys       *keyring // nil: gossip in the clear
	sec        atomic.Pointer[Security]
	// unreach is this silo's standing as its record says it: reachable,
	// unreachMarked or unreachDrained (unreachable.go). It only grows.
	unreach atomic.Int32
	// unreachFrom is the revision at which a majority of the others was
	// first seen reporting this silo unreachable, 0 if none is (see
	// CheckUnreachable; its caller's goroutine only).
	unreachFrom int64
	unreachSeen time.Time // when unreachFrom was set
	// refused holds the leases of records admit kept out of the view
	// (watch goroutine only).
	refused map[int64]bool

	ctx    context.Context // background work; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	view     View
	loaded   bool          // view read from etcd at least once
	changed  chan struct{} // closed and replaced at every view change
	subs     map[int]chan View
	nextSub  int
	departed map[string]departure
	selfSeen bool
	leaving  bool
	closed   bool
	fenceErr error
	revokeQ  []revokeReq
	suspects map[string]bool           // peer addresses being checked by Suspect
	proven   map[clientv3.LeaseID]bool // leases this silo proved dead (recordProof)
	revokeC  chan struct{}             // signals revokeQ, buffered 1

	// etcdFailing is when the lease keepalives began to fail (zero while
	// the last one succeeded), etcdErr the last failure, and suspendedAt
	// when the silo was last suspended (zero while it is not): what
	// Health reports.
	etcdFailing time.Time
	etcdErr     error
	suspendedAt time.Time

	fenced    chan struct{}
	fenceOnce sync.Once
	renewed   chan struct{} // closed and replaced at every renewal (WaitValid)
	// suspensions counts the times the keepalive loop found the silo past
	// its fence bound (for tests).
	suspensions atomic.Int64
	// epoch and validUntil bound when the silo may still act as a member:
	// validUntil is the last successful keepalive's send time plus the
	// fence bound (FenceAfter), in ns since epoch, on the monotonic clock. Valid reads
	// them on every turn, so a silo that was paused (a long GC, a stopped
	// VM) past its fence runs nothing more, even before its fencing timer
	// has had a chance to fire. epoch is set once, by New, before any
	// goroutine that calls Valid can exist (a runtime's sweep may call it
	// before Start); validUntil is 0, never valid, until Start.
	epoch      time.Time
	validUntil atomic.Int64
	closeOnce  sync.Once

	mlMu  sync.Mutex
	known map[string]clientv3.LeaseID // gossip member -> lease in its metadata
	// alive maps the gossip members that are not dead or gone to their
	// gossip address, as gossip events told (memberlist's Members returns
	// nodes it goes on changing, so they are read only inside its events).
	alive map[string]string
	// gossipChanged is closed and replaced at every gossip event.
	gossipChanged chan struct{}
	// retired holds the leases of incarnations that gossip showed replaced
	// by a new one under the same name.
	retired map[clientv3.LeaseID]bool
}

type departure struct {
	at       time.Time
	graceful bool
	expired  bool // its lease expired: no one revoked it (see expired)
	fence    time.Duration
	peer     string // the departed silo's peer address
	lease    clientv3.LeaseID
}

// New checks cfg and returns the silo's membership, not yet joined: it
// starts nothing and touches no network. Start joins.
func New(cfg Config) (*Membership, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(cfg.GossipAddr)
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "membership: gossip address %q: %w", cfg.GossipAddr, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	bindPort, err := strconv.Atoi(port)
	if err != nil || bindPort < 0 || bindPort > 65535 || net.ParseIP(host) == nil {
		return nil, errs.New(codes.InvalidArgument, "membership: gossip address %q: want IP:port", cfg.GossipAddr)
	}
	m := &Membership{
		cfg:           cfg,
		clk:           cfg.Clock,
		epoch:         cfg.Clock.Now(),
		log:           cfg.Logger.With("silo", cfg.Name),
		client:        cfg.Client,
		dir:           cfg.Prefix + "members/",
		fenceAfter:    cfg.FenceAfter,
		gossipHost:    host,
		gossipPort:    bindPort,
		changed:       make(chan struct{}),
		subs:          make(map[int]chan View),
		departed:      make(map[string]departure),
		proven:        make(map[clientv3.LeaseID]bool),
		revokeC:       make(chan struct{}, 1),
		fenced:        make(chan struct{}),
		renewed:       make(chan struct{}),
		known:         make(map[string]clientv3.LeaseID),
		alive:         make(map[string]string),
		gossipChanged: make(chan struct{}),
		retired:       make(map[clientv3.LeaseID]bool),
		refused:       make(map[int64]bool),
	}
	if cfg.KeyFile != "" {
		if m.keys, err = newKeyring(cfg.KeyFile); err != nil {
			return nil, errs.New(codes.InvalidArgument, "%w", err)
		}
	}
	sec, err := m.readSecurity()
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "%w", err)
	}
	m.sec.Store(&sec)
	m.key = m.dir + cfg.Name
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// Start registers the silo: it takes an etcd lease, joins the gossip group,
// writes its record and returns once its view includes it. If a record with
// the same name exists (a predecessor that did not leave), it waits, bounded
// by ctx, until that record is gone (revoked by detection or expired). Start
// is called once; Close releases everything (Leave first for a graceful
// exit), also after a failed Start.
func (m *Membership) Start(ctx context.Context) error {
	cfg := m.cfg
	if !m.started.CompareAndSwap(false, true) {
		return errs.New(codes.FailedPrecondition, "membership: started twice")
	}
	ok := false
	defer func() {
		if !ok {
			m.abort()
		}
	}()

	sent := m.clk.Now()
	m.validUntil.Store(int64(sent.Sub(m.epoch) + cfg.FenceAfter))
	grant, err := m.client.Grant(ctx, int64(cfg.LeaseTTL/time.Second))
	if err != nil {
		return etcderr.FromCall(ctx, err, "membership: grant lease")
	}
	m.lease = grant.ID
	m.wg.Add(3)
	go m.keepAlive(sent)
	go m.watchLoop()
	go m.revokeLoop()

	// Gossip.
	mc := m.gossipConfig(m.gossipHost, m.gossipPort)
	if m.keys != nil {
		mc.Keyring = m.keys.ring
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	if m.keys != nil || cfg.PeerCAFile != "" {
		m.wg.Add(1)
		go m.keyringLoop()
	}
	if cfg.Gossip != nil {
		cfg.Gossip(mc)
	}
	ml, err := memberlist.Create(mc)
	m.mlMu.Lock()
	m.ml = ml
	m.mlMu.Unlock()
	if err != nil {
		return errs.New(codes.Unavailable, "membership: start gossip on %s: %w", cfg.GossipAddr, err)
	}
	m.self = Member{
		Name:        cfg.Name,
		PeerAddr:    cfg.PeerAddr,
		GatewayAddr: cfg.GatewayAddr,
		GossipAddr:  m.ml.LocalNode().Address(),
		StartTime:   time.Now().UTC().Truncate(time.Millisecond),
		LeaseID:     int64(m.lease),
		FenceAfter:  cfg.FenceAfter,
	}

	// Seeds, plus the members etcd already knows.
	if err := m.waitLoaded(ctx); err != nil {
		return err
	}
	seeds := expandSeeds(ctx, cfg.Resolver, cfg.Join, strconv.Itoa(DefaultGossipPort), m.log)
	for _, mi := range m.View().Members {
		if mi.Name != cfg.Name && mi.GossipAddr != "" {
			seeds = appendNew(seeds, mi.GossipAddr)
		}
	}
	seeds = removeAll(seeds, m.self.GossipAddr)
	if len(seeds) > 0 {
		if n, err := m.ml.Join(seeds); err != nil {
			m.log.Warn("gossip: could not reach some seeds", "seeds", seeds, "reached", n, "err", err)
		}
	}
	m.wg.Add(1)
	go m.gossipLoop()

	// The record.
	rec, err := json.Marshal(m.record(false))
	if err != nil {
		return errs.New(codes.Internal, "membership: %w", err)
	}
	var created int64 // the record's create revision
	for {
		tx, err := m.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(m.key), "=", 0)).
			Then(clientv3.OpPut(m.key, string(rec), clientv3.WithLease(m.lease))).
			Else(clientv3.OpGet(m.key)).Commit()
		if err != nil {
			return etcderr.FromCall(ctx, err, "membership: write member record")
		}
		if tx.Succeeded {
			created = tx.Header.Revision
			break
		}
		m.log.Warn("membership: a silo with this name is still registered; waiting for its record to go", "key", m.key)
		if err := m.waitView(ctx, func(v View) bool { _, ok := v.Member(cfg.Name); return !ok }); err != nil {
			return err
		}
	}
	if err := m.waitView(ctx, func(v View) bool {
		mi, ok := v.Member(cfg.Name)
		return ok && mi.LeaseID == int64(m.lease)
	}); err != nil {
		return err
	}
	// Refused if a member of the cluster before this silo cannot talk to
	// it (see security.go); the record goes with the lease (abort).
	if err := m.checkOlder(ctx, created); err != nil {
		return err
	}
	ok = true
	m.log.Info("joined the cluster", "gossip_addr", m.self.GossipAddr, "security", m.Security().String(), "lease", fmt.Sprintf("%x", int64(m.lease)), "members", len(m.View().Members))
	return nil
}

// abort undoes a failed New.
func (m *Membership) abort() {
	m.shutdown()
	if m.lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = m.client.Revoke(ctx, m.lease)
		cancel()
	}
}

// View returns the current view. Before New returns it is empty.
func (m *Membership) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view
}

// Self returns this silo's record (not marked leaving).
func (m *Membership) Self() Member { return m.record(false) }

// MarkLeaving marks the silo's record as leaving: from the view in which
// every silo sees it, the silo owns no addresses (View.Owners leaves it out),
// so others route to the new owners, which ask this silo to release each
// address before activating it. The record and the lease stay until Leave.
func (m *Membership) MarkLeaving(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errs.New(codes.FailedPrecondition, "membership: closed")
	}
	m.leaving = true
	m.mu.Unlock()
	if err := m.putRecord(ctx, true, "mark record leaving"); err != nil {
		return err
	}
	return m.waitView(ctx, func(v View) bool {
		mi, ok := v.Member(m.cfg.Name)
		return !ok || mi.Leaving
	})
}

// putRecord writes this silo's record again, as it is now (leaving or
// not), if its lease is still the record's; what names the write in an
// error.
func (m *Membership) putRecord(ctx context.Context, leaving bool, what string) error {
	rec, err := json.Marshal(m.record(leaving))
	if err != nil {
		return errs.New(codes.Internal, "membership: %w", err)
	}
	tx, err := m.client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(m.key), "=", m.lease)).
		Then(clientv3.OpPut(m.key, string(rec), clientv3.WithLease(m.lease))).Commit()
	if err != nil {
		return etcderr.FromCall(ctx, err, "membership: %s", what)
	}
	if !tx.Succeeded {
		return errs.New(codes.FailedPrecondition, "membership: the silo's record is gone")
	}
	return nil
}

// gossipLeaveWait bounds how long Leave waits for its gossip leave
// message to go out.
const gossipLeaveWait = time.Second

// Leave leaves the cluster gracefully: the record is marked leaving (if
// MarkLeaving did not already) and removed (its lease revoked), so other
// silos take over this silo's addresses at once, and the silo leaves the
// gossip group. Call it once the silo has stopped serving activations.
// Fenced does not fire because of Leave. Close still has to be called.
func (m *Membership) Leave(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errs.New(codes.FailedPrecondition, "membership: closed")
	}
	already := m.leaving
	m.leaving = true
	m.mu.Unlock()

	var errList []error
	if rec, err := json.Marshal(m.record(true)); err == nil && !already {
		_, err := m.client.Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(m.key), "=", m.lease)).
			Then(clientv3.OpPut(m.key, string(rec), clientv3.WithLease(m.lease))).Commit()
		if err != nil {
			errList = append(errList, etcderr.FromCall(ctx, err, "membership: mark record leaving"))
		}
	}
	if _, err := m.client.Revoke(ctx, m.lease); err != nil && !isLeaseNotFound(err) {
		errList = append(errList, etcderr.FromCall(ctx, err, "membership: revoke lease"))
	}
	// The others learn of the departure from etcd (the record, removed
	// above); the gossip leave only spares them probing this silo. When the
	// whole cluster stops, no member may be left to take the broadcast:
	// it is waited for briefly, and its timeout is no error.
	timeout := gossipLeaveWait
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, max(time.Until(dl), 0))
	}
	if err := m.ml.Leave(timeout); err != nil {
		m.log.Info("left the gossip group unannounced: the others see the silo gone from etcd", "err", err)
	}
	m.log.Info("left the cluster")
	return errors.Join(errList...)
}

// Close stops the membership: gossip (without leaving the group: others see
// the silo die), the keepalives and the watch. The lease is not revoked (use
// Leave first for that), so without Leave the record stays until gossip
// detection removes it or the lease expires. Subscriber channels are closed.
// Close may be called more than once.
func (m *Membership) Close() error {
	m.shutdown()
	return nil
}

func (m *Membership) shutdown() {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		m.cancel()
		if m.ml != nil {
			if err := m.ml.Shutdown(); err != nil {
				m.log.Debug("gossip shutdown", "err", err)
			}
		}
		m.wg.Wait()
		m.mu.Lock()
		for id, c := range m.subs {
			close(c)
			delete(m.subs, id)
		}
		m.mu.Unlock()
	})
}
