package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/errs"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// Membership has two layers (DESIGN.md, "Cluster"):
//
// Authority, in etcd. Each silo writes its record (MemberInfo) under
// Prefix+"members/<name>", bound to an etcd lease of its own that it keeps
// alive. The view is the set of records; its Version is the etcd revision of
// the change that produced it. Every silo watches the records and keeps its
// View; silos that saw the same changes agree on Version. (A silo that had to
// re-read the records after its watch broke takes the revision of that read
// when the set differs from what it had, so its Version can be higher than
// another silo's for the same set until the next change; Versions of one silo
// only grow.)
//
// Detection, with hashicorp/memberlist (SWIM with Lifeguard). A silo joins
// the gossip group through its Join seeds (each DNS name expanded to all its
// addresses) and the gossip addresses of the members already in the view.
// Each silo advertises its lease ID in its gossip metadata. When gossip
// declares a silo dead, every survivor revokes exactly that silo's lease, so
// its record leaves the view at once, long before the lease would expire.
// Revoking a lease that is already gone is a no-op, so survivors doing it
// together is harmless; and since the lease ID names one incarnation of a
// silo, a restarted silo with the same name is never hit by a revocation meant
// for its predecessor. A silo whose gossip metadata shows a new lease (it was
// restarted under the same name before gossip noticed) has its old lease
// revoked the same way.
//
// Self-fencing. A silo fences itself, closing Fenced(), when it can no longer
// be sure it holds its lease:
//   - a keepalive says the lease is gone (revoked by survivors, or expired);
//   - its own record left the view without Leave;
//   - no keepalive has succeeded for FenceAfter (default LeaseTTL/3).
//
// The timing argument: the silo notes the time s just before it sends a
// keepalive. If the keepalive succeeds, etcd renewed the lease at some time
// after s, so the lease cannot expire before s+TTL. The silo fences at
// (last successful s)+FenceAfter at the latest, and FenceAfter < TTL, so it
// fences strictly before its lease can expire, with TTL-FenceAfter to spare
// (assuming the silo's and etcd's clocks run at the same rate; both use
// monotonic time). A revoked lease fails every later keepalive, so a silo
// whose lease was revoked at time r fences by r+FenceAfter at the latest
// (its last successful s precedes r), or at once when it reaches etcd.
// Hence TakeoverAt: a member removed without Leave is certainly fenced
// FenceAfter (its own, from its record) after its removal was observed; a
// member that left with Leave stopped serving before its record went.
// Fencing is final for a Membership: the silo stops serving activations and
// makes a new Membership (a new lease, a new incarnation) to come back.
//
// Graceful leave: Leave marks the record as leaving, revokes the lease (the
// record disappears at once, so others take over without waiting) and leaves
// the gossip group.

// DefaultLeaseTTL is the default MembershipConfig.LeaseTTL.
const DefaultLeaseTTL = 10 * time.Second

// DefaultGossipPort is the gossip port of seeds given without one.
const DefaultGossipPort = 7946

// MemberInfo is one silo's record in the membership view.
type MemberInfo struct {
	Name        string    `json:"name"`
	PeerAddr    string    `json:"peer_addr"`
	GatewayAddr string    `json:"gateway_addr"`
	GossipAddr  string    `json:"gossip_addr"`
	StartTime   time.Time `json:"start_time"`
	// LeaseID is the etcd lease the record is bound to; survivors revoke it
	// when gossip declares the silo dead.
	LeaseID int64 `json:"lease_id"`
	// FenceAfter is the silo's fencing bound (see Membership).
	FenceAfter time.Duration `json:"fence_after_ns"`
	// Leaving is set by Leave just before the record is removed: the silo
	// has stopped serving and its addresses may be taken over at once.
	Leaving bool `json:"leaving,omitempty"`
}

// View is a membership view: the members in etcd at revision Version.
type View struct {
	Version int64
	// Members sorted by Name. Shared between copies of the view: do not
	// modify.
	Members []MemberInfo
}

// Names returns the members' names, sorted.
func (v View) Names() []string {
	names := make([]string, len(v.Members))
	for i, m := range v.Members {
		names[i] = m.Name
	}
	return names
}

// Member returns the record of the member named name.
func (v View) Member(name string) (MemberInfo, bool) {
	i := sort.Search(len(v.Members), func(i int) bool { return v.Members[i].Name >= name })
	if i < len(v.Members) && v.Members[i].Name == name {
		return v.Members[i], true
	}
	return MemberInfo{}, false
}

// Owners returns the names, sorted, of the members that own addresses: those
// not leaving.
func (v View) Owners() []string {
	names := make([]string, 0, len(v.Members))
	for _, m := range v.Members {
		if !m.Leaving {
			names = append(names, m.Name)
		}
	}
	return names
}

// Owner returns the member owning addr in this view (see Owner), or "" if no
// member owns addresses.
func (v View) Owner(addr string) string { return Owner(addr, v.Owners()) }

// MembershipConfig configures NewMembership.
type MembershipConfig struct {
	// Name of the silo (--name), unique in the cluster:
	// [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}.
	Name string
	// PeerAddr and GatewayAddr are published in the record for other silos
	// and clients.
	PeerAddr    string
	GatewayAddr string
	// GossipAddr is the memberlist bind address, IP:port (--gossip-addr);
	// port 0 picks a free port (the record has the bound one). Default
	// 127.0.0.1:7946.
	GossipAddr string
	// Join seeds (--join): IP:port, or DNS names (with or without a port),
	// each expanded to all its addresses. Default port DefaultGossipPort.
	Join []string
	// Client is the etcd client; Prefix the key prefix (Etcd.Prefix()).
	Client *clientv3.Client
	Prefix string
	// LeaseTTL of the silo's etcd lease. Default DefaultLeaseTTL. etcd may
	// grant more (its minimum TTL); the bounds use what was asked.
	LeaseTTL time.Duration
	// FenceAfter: the silo fences itself when no keepalive has succeeded for
	// this long. Default LeaseTTL/3; must be below LeaseTTL. Keepalives are
	// sent every FenceAfter/4.
	FenceAfter time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Gossip, if set, adjusts the memberlist configuration after the
	// defaults (see gossipConfig) are applied.
	Gossip func(*memberlist.Config)
	// Resolver expands seed names; default net.DefaultResolver.
	Resolver *net.Resolver
}

// Membership is a silo's membership in the cluster: its record in etcd, its
// gossip group member, and its view of the cluster. Its methods are safe for
// concurrent use.
type Membership struct {
	cfg        MembershipConfig
	log        *slog.Logger
	client     *clientv3.Client
	dir        string // Prefix+"members/"
	key        string // dir+Name
	lease      clientv3.LeaseID
	fenceAfter time.Duration
	self       MemberInfo
	ml         *memberlist.Memberlist

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
	suspects map[string]bool // peer addresses being checked by Suspect
	revokeC  chan struct{}   // signals revokeQ, buffered 1

	fenced    chan struct{}
	fenceOnce sync.Once
	// epoch and validUntil bound when the silo may still act as a member:
	// validUntil is the last successful keepalive's send time plus
	// FenceAfter, in ns since epoch, on the monotonic clock. Valid reads
	// them on every turn, so a silo that was paused (a long GC, a stopped
	// VM) past its fence runs nothing more, even before its fencing timer
	// has had a chance to fire.
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
	fence    time.Duration
	peer     string // the departed silo's peer address
}

// Departure is a member removed from the view without leaving gracefully,
// whose addresses may not be taken over before At (see TakeoverAt).
type Departure struct {
	Name     string
	PeerAddr string
	At       time.Time
}

// Pending lists the departures whose takeover time is still ahead.
func (m *Membership) Pending() []Departure {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out []Departure
	for name, d := range m.departed {
		if _, in := m.view.Member(name); in && name != m.cfg.Name {
			continue
		}
		if at := d.at.Add(d.fence); !d.graceful && at.After(now) {
			out = append(out, Departure{Name: name, PeerAddr: d.peer, At: at})
		}
	}
	return out
}

type revokeReq struct {
	lease  clientv3.LeaseID
	name   string
	reason string
	at     time.Time
	proven bool // the silo is certainly gone: revoke without a majority
}

func (c *MembershipConfig) fill() error {
	if !grain.ValidName(c.Name) {
		return errs.New(codes.InvalidArgument, "membership: bad silo name %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", c.Name)
	}
	if c.Client == nil {
		return errs.New(codes.InvalidArgument, "membership: no etcd client")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultEtcdConfig().Prefix
	}
	if !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	if c.GossipAddr == "" {
		c.GossipAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultGossipPort))
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.LeaseTTL < time.Second {
		return errs.New(codes.InvalidArgument, "membership: lease TTL %v is below 1s", c.LeaseTTL)
	}
	if c.FenceAfter == 0 {
		c.FenceAfter = c.LeaseTTL / 3
	}
	if c.FenceAfter <= 0 || c.FenceAfter >= c.LeaseTTL {
		return errs.New(codes.InvalidArgument, "membership: FenceAfter %v must be positive and below the lease TTL %v", c.FenceAfter, c.LeaseTTL)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	return nil
}

// NewMembership registers the silo: it takes an etcd lease, joins the gossip
// group, writes its record and returns once its view includes it. If a record
// with the same name exists (a predecessor that did not leave), it waits,
// bounded by ctx, until that record is gone (revoked by detection or
// expired). Close releases everything; Leave first for a graceful exit.
func NewMembership(ctx context.Context, cfg MembershipConfig) (*Membership, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(cfg.GossipAddr)
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "membership: gossip address %q: %v", cfg.GossipAddr, err)
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
		log:           cfg.Logger.With("silo", cfg.Name),
		client:        cfg.Client,
		dir:           cfg.Prefix + "members/",
		fenceAfter:    cfg.FenceAfter,
		changed:       make(chan struct{}),
		subs:          make(map[int]chan View),
		departed:      make(map[string]departure),
		revokeC:       make(chan struct{}, 1),
		fenced:        make(chan struct{}),
		known:         make(map[string]clientv3.LeaseID),
		alive:         make(map[string]string),
		gossipChanged: make(chan struct{}),
		retired:       make(map[clientv3.LeaseID]bool),
	}
	m.key = m.dir + cfg.Name
	m.ctx, m.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			m.abort()
		}
	}()

	sent := time.Now()
	m.epoch = sent
	m.validUntil.Store(int64(cfg.FenceAfter))
	grant, err := m.client.Grant(ctx, int64((cfg.LeaseTTL+time.Second-1)/time.Second))
	if err != nil {
		return nil, m.etcdErr(ctx, "grant lease", err)
	}
	m.lease = grant.ID
	m.wg.Add(3)
	go m.keepAlive(sent)
	go m.watchLoop()
	go m.revokeLoop()

	// Gossip.
	mc := m.gossipConfig(host, bindPort)
	if cfg.Gossip != nil {
		cfg.Gossip(mc)
	}
	ml, err := memberlist.Create(mc)
	m.mlMu.Lock()
	m.ml = ml
	m.mlMu.Unlock()
	if err != nil {
		return nil, errs.New(codes.Unavailable, "membership: start gossip on %s: %v", cfg.GossipAddr, err)
	}
	m.self = MemberInfo{
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
		return nil, err
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
	rec, err := json.Marshal(m.self)
	if err != nil {
		return nil, errs.New(codes.Internal, "membership: %v", err)
	}
	for {
		tx, err := m.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(m.key), "=", 0)).
			Then(clientv3.OpPut(m.key, string(rec), clientv3.WithLease(m.lease))).
			Else(clientv3.OpGet(m.key)).Commit()
		if err != nil {
			return nil, m.etcdErr(ctx, "write member record", err)
		}
		if tx.Succeeded {
			break
		}
		m.log.Warn("membership: a silo with this name is still registered; waiting for its record to go", "key", m.key)
		if err := m.waitView(ctx, func(v View) bool { _, ok := v.Member(cfg.Name); return !ok }); err != nil {
			return nil, err
		}
	}
	if err := m.waitView(ctx, func(v View) bool {
		mi, ok := v.Member(cfg.Name)
		return ok && mi.LeaseID == int64(m.lease)
	}); err != nil {
		return nil, err
	}
	ok = true
	m.log.Info("joined the cluster", "gossip_addr", m.self.GossipAddr, "lease", fmt.Sprintf("%x", int64(m.lease)), "members", len(m.View().Members))
	return m, nil
}

func (m *Membership) etcdErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return errs.New(errs.Code(etcderr.Wrap(ctx.Err())), "membership: %s: %v", what, ctx.Err())
	}
	return etcderr.Wrap(fmt.Errorf("membership: %s: %w", what, err))
}

// abort undoes a failed NewMembership.
func (m *Membership) abort() {
	m.shutdown()
	if m.lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = m.client.Revoke(ctx, m.lease)
		cancel()
	}
}

// gossipConfig is memberlist's LAN configuration tuned to notice a dead silo
// in about two seconds on a small cluster: a probe every 500 ms answered
// within 250 ms, and suspicion lasting 3 probe intervals (scaled by log10 of
// the cluster size, and by up to 4 more while Lifeguard waits for
// confirmations on larger clusters). Lifeguard's local health awareness stays
// on (AwarenessMaxMultiplier 8): a silo that is itself slow probes less
// often instead of accusing healthy peers.
func (m *Membership) gossipConfig(host string, port int) *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	c.Name = m.cfg.Name
	c.BindAddr = host
	c.BindPort = port
	c.AdvertisePort = port
	c.ProbeInterval = 500 * time.Millisecond
	c.ProbeTimeout = 250 * time.Millisecond
	c.SuspicionMult = 3
	c.SuspicionMaxTimeoutMult = 4
	c.TCPTimeout = 2 * time.Second
	c.PushPullInterval = 15 * time.Second
	c.GossipToTheDeadTime = 15 * time.Second
	// A silo restarted on another port takes its name back once the old
	// incarnation has been dead for a second.
	c.DeadNodeReclaimTime = time.Second
	c.Delegate = &gossipDelegate{meta: []byte(strconv.FormatInt(int64(m.lease), 16))}
	c.Events = &gossipEvents{m: m}
	c.Logger = log.New(&gossipLog{log: m.log.With("lib", "memberlist")}, "", 0)
	return c
}

// View returns the current view. Before NewMembership returns it is empty.
func (m *Membership) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view
}

// Self returns this silo's record.
func (m *Membership) Self() MemberInfo { return m.self }

// Subscribe returns a channel that receives the current view at once and
// then every newer view. It holds one view: a subscriber that reads slowly
// skips intermediate views and always receives the newest, never an older one
// after a newer. Views are sent from the membership's watcher without
// blocking it. The channel is closed by cancel or Close; cancel may be called
// more than once.
func (m *Membership) Subscribe() (views <-chan View, cancel func()) {
	ch := make(chan View, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		close(ch)
		return ch, func() {}
	}
	id := m.nextSub
	m.nextSub++
	m.subs[id] = ch
	ch <- m.view
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c, ok := m.subs[id]; ok {
			delete(m.subs, id)
			close(c)
		}
	}
}

// Fenced is closed when the silo can no longer be sure it holds its lease.
// From then on it must not serve activations; see Membership. It is never
// closed by Leave or Close.
func (m *Membership) Fenced() <-chan struct{} { return m.fenced }

// Valid reports whether the silo may still act as a member: it has not
// fenced itself, and its last successful keepalive was sent less than
// FenceAfter ago (by the monotonic clock, so a pause counts).
func (m *Membership) Valid() bool {
	select {
	case <-m.fenced:
		return false
	default:
	}
	return time.Since(m.epoch) < time.Duration(m.validUntil.Load())
}

// FenceCause says why the silo fenced itself, nil while it has not.
func (m *Membership) FenceCause() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fenceErr
}

// TakeoverAt returns when another silo may start activations of addresses
// that the member name owned: the time its removal was observed for a member
// that left with Leave, that time plus the member's FenceAfter for one removed
// otherwise (when it is certainly fenced), and now plus this silo's
// FenceAfter for a name this silo never saw leave. ok is false while name is
// in the view.
func (m *Membership) TakeoverAt(name string) (at time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, in := m.view.Member(name); in {
		return time.Time{}, false
	}
	d, seen := m.departed[name]
	switch {
	case !seen:
		return time.Now().Add(m.fenceAfter), true
	case d.graceful:
		return d.at, true
	default:
		return d.at.Add(d.fence), true
	}
}

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
	leaving := m.self
	leaving.Leaving = true
	rec, err := json.Marshal(leaving)
	if err != nil {
		return errs.New(codes.Internal, "membership: %v", err)
	}
	tx, err := m.client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(m.key), "=", m.lease)).
		Then(clientv3.OpPut(m.key, string(rec), clientv3.WithLease(m.lease))).Commit()
	if err != nil {
		return m.etcdErr(ctx, "mark record leaving", err)
	}
	if !tx.Succeeded {
		return errs.New(codes.FailedPrecondition, "membership: the silo's record is gone")
	}
	return m.waitView(ctx, func(v View) bool {
		mi, ok := v.Member(m.cfg.Name)
		return !ok || mi.Leaving
	})
}

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
	leaving := m.self
	leaving.Leaving = true
	if rec, err := json.Marshal(leaving); err == nil && !already {
		_, err := m.client.Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(m.key), "=", m.lease)).
			Then(clientv3.OpPut(m.key, string(rec), clientv3.WithLease(m.lease))).Commit()
		if err != nil {
			errList = append(errList, m.etcdErr(ctx, "mark record leaving", err))
		}
	}
	if _, err := m.client.Revoke(ctx, m.lease); err != nil && !isLeaseNotFound(err) {
		errList = append(errList, m.etcdErr(ctx, "revoke lease", err))
	}
	timeout := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), 0)
	}
	if err := m.ml.Leave(timeout); err != nil {
		errList = append(errList, errs.New(codes.Unavailable, "membership: leave gossip group: %v", err))
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

func (m *Membership) fence(cause error) {
	m.fenceOnce.Do(func() {
		m.mu.Lock()
		m.fenceErr = cause
		m.mu.Unlock()
		m.log.Error("fenced: this silo can no longer be sure it holds its lease and must stop serving activations", "cause", cause)
		close(m.fenced)
	})
}

func (m *Membership) isLeaving() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leaving
}

// keepAlive renews the lease every FenceAfter/4 and fences the silo as
// described on Membership. sent is when the lease grant was sent.
func (m *Membership) keepAlive(sent time.Time) {
	defer m.wg.Done()
	interval := m.fenceAfter / 4
	lastOK := sent
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		if m.isLeaving() {
			return
		}
		deadline := lastOK.Add(m.fenceAfter)
		now := time.Now()
		if !now.Before(deadline) {
			m.fence(fmt.Errorf("no lease keepalive succeeded for %v", m.fenceAfter))
			return
		}
		ctx, cancel := context.WithDeadline(m.ctx, minTime(now.Add(m.fenceAfter/2), deadline))
		resp, err := m.client.KeepAliveOnce(ctx, m.lease)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			lastOK = now
			m.validUntil.Store(int64(lastOK.Add(m.fenceAfter).Sub(m.epoch)))
		case m.ctx.Err() != nil:
			return
		case err == nil || isLeaseNotFound(err):
			if m.isLeaving() {
				return
			}
			m.fence(errors.New("the silo's lease was revoked or expired"))
			return
		default:
			m.log.Warn("lease keepalive failed", "err", err, "fence_in", time.Until(lastOK.Add(m.fenceAfter)))
		}
		next := minTime(now.Add(interval), lastOK.Add(m.fenceAfter))
		t.Reset(max(time.Until(next), 0))
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound)
}

// watchLoop keeps the view: read the records, watch from there, and read
// again when the watch breaks.
func (m *Membership) watchLoop() {
	defer m.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		err := m.watchOnce()
		if m.ctx.Err() != nil {
			return
		}
		m.log.Debug("membership watch broke; re-reading", "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (m *Membership) watchOnce() error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(m.ctx))
	defer cancel()
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := m.client.Get(gctx, m.dir, clientv3.WithPrefix())
	gcancel()
	if err != nil {
		return err
	}
	members := make(map[string]MemberInfo, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if mi, ok := m.decode(kv); ok {
			members[mi.Name] = mi
		}
	}
	m.replace(members, resp.Header.Revision)
	wch := m.client.Watch(ctx, m.dir, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithPrevKV())
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			m.apply(wr.Events)
		}
	}
	return errors.New("watch closed")
}

func (m *Membership) decode(kv *mvccpb.KeyValue) (MemberInfo, bool) {
	var mi MemberInfo
	name := strings.TrimPrefix(string(kv.Key), m.dir)
	if err := json.Unmarshal(kv.Value, &mi); err != nil || mi.Name != name {
		m.log.Warn("ignoring a malformed member record", "key", string(kv.Key), "err", err)
		return MemberInfo{}, false
	}
	return mi, true
}

// replace sets the members read at revision rev.
func (m *Membership) replace(members map[string]MemberInfo, rev int64) {
	m.mu.Lock()
	old := m.current()
	if m.loaded && reflect.DeepEqual(old, members) {
		m.mu.Unlock()
		return
	}
	now := time.Now()
	for name, mi := range old {
		if _, ok := members[name]; !ok {
			m.departed[name] = departure{at: now, graceful: mi.Leaving, fence: fenceOf(mi, m.fenceAfter), peer: mi.PeerAddr}
		}
	}
	m.publish(members, max(rev, m.view.Version))
}

// apply applies watch events.
func (m *Membership) apply(events []*clientv3.Event) {
	m.mu.Lock()
	members := m.current()
	now := time.Now()
	var rev int64
	for _, ev := range events {
		rev = ev.Kv.ModRevision
		name := strings.TrimPrefix(string(ev.Kv.Key), m.dir)
		switch ev.Type {
		case clientv3.EventTypePut:
			if mi, ok := m.decode(ev.Kv); ok {
				members[name] = mi
			} else {
				delete(members, name)
			}
		case clientv3.EventTypeDelete:
			d := departure{at: now, fence: m.fenceAfter}
			if old, ok := members[name]; ok {
				d.fence = fenceOf(old, m.fenceAfter)
				d.graceful = old.Leaving
				d.peer = old.PeerAddr
			}
			if ev.PrevKv != nil {
				var prev MemberInfo
				if json.Unmarshal(ev.PrevKv.Value, &prev) == nil {
					d.graceful = prev.Leaving
					d.fence = fenceOf(prev, m.fenceAfter)
					d.peer = prev.PeerAddr
				}
			}
			m.departed[name] = d
			delete(members, name)
		}
	}
	m.publish(members, max(rev, m.view.Version))
}

func fenceOf(mi MemberInfo, dflt time.Duration) time.Duration {
	if mi.FenceAfter > 0 {
		return mi.FenceAfter
	}
	return dflt
}

// current returns a copy of the members as a map; m.mu held.
func (m *Membership) current() map[string]MemberInfo {
	cur := make(map[string]MemberInfo, len(m.view.Members))
	for _, mi := range m.view.Members {
		cur[mi.Name] = mi
	}
	return cur
}

// publish installs a new view and tells subscribers; m.mu held, released.
func (m *Membership) publish(members map[string]MemberInfo, version int64) {
	v := View{Version: version, Members: make([]MemberInfo, 0, len(members))}
	for _, mi := range members {
		v.Members = append(v.Members, mi)
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].Name < v.Members[j].Name })
	m.view = v
	m.loaded = true
	close(m.changed)
	m.changed = make(chan struct{})
	for _, c := range m.subs {
		select {
		case <-c:
		default:
		}
		c <- v
	}
	// Departures are remembered for a while: TakeoverAt is asked right after
	// a view change.
	for name, d := range m.departed {
		if time.Since(d.at) > 10*time.Minute+d.fence {
			delete(m.departed, name)
		}
	}
	var cause error
	if m.lease != 0 {
		mi, in := v.Member(m.cfg.Name)
		mine := in && mi.LeaseID == int64(m.lease)
		switch {
		case mine:
			m.selfSeen = true
		case m.selfSeen && !m.leaving:
			cause = errors.New("the silo's record left the membership view")
		}
	}
	m.mu.Unlock()
	if cause != nil {
		m.fence(cause)
	}
}

// waitLoaded waits for the first read of the view.
func (m *Membership) waitLoaded(ctx context.Context) error {
	return m.waitFor(ctx, func() bool { return m.loaded })
}

// waitView waits until cond holds for the view.
func (m *Membership) waitView(ctx context.Context, cond func(View) bool) error {
	return m.waitFor(ctx, func() bool { return cond(m.view) })
}

// waitFor waits until cond (called with m.mu held) holds, the membership
// fences or ctx ends.
func (m *Membership) waitFor(ctx context.Context, cond func() bool) error {
	for {
		m.mu.Lock()
		done, ch := cond(), m.changed
		m.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-m.fenced:
			return errs.New(codes.Unavailable, "membership: fenced while joining: %v", m.FenceCause())
		case <-ctx.Done():
			return errs.New(errs.Code(etcderr.Wrap(ctx.Err())), "membership: waiting for the view: %v", ctx.Err())
		}
	}
}

// gossipLoop keeps the gossip group in line with the view: members of the
// view that gossip does not list as alive at their gossip address (they
// joined through other seeds, came back on another port, or a partition
// healed) are joined, at every view change and every few seconds.
func (m *Membership) gossipLoop() {
	defer m.wg.Done()
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	for {
		m.mu.Lock()
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-m.ctx.Done():
			return
		case <-ch:
		case <-t.C:
		}
		m.mlMu.Lock()
		alive := maps.Clone(m.alive)
		m.mlMu.Unlock()
		var addrs []string
		for _, mi := range m.View().Members {
			if mi.Name != m.cfg.Name && mi.GossipAddr != "" && alive[mi.Name] != mi.GossipAddr {
				addrs = append(addrs, mi.GossipAddr)
			}
		}
		if len(addrs) > 0 && m.ctx.Err() == nil {
			if n, err := m.ml.Join(addrs); err != nil {
				m.log.Debug("gossip: could not reach members of the view", "addrs", addrs, "reached", n, "err", err)
			}
		}
	}
}

// noteGossip is called for gossip events (serially, from memberlist).
func (m *Membership) noteGossip(n *memberlist.Node, left bool) {
	if n.Name == m.cfg.Name {
		return
	}
	lease, err := strconv.ParseInt(string(n.Meta), 16, 64)
	if err != nil || lease == 0 {
		m.log.Warn("gossip member without a lease in its metadata", "member", n.Name)
		lease = 0
	}
	m.mlMu.Lock()
	if m.retired[clientv3.LeaseID(lease)] {
		// Gossip about an incarnation already replaced under a new lease:
		// stale, it must not move known back.
		m.mlMu.Unlock()
		return
	}
	// A member that left keeps its entry, so that its return under a new
	// lease proves the old lease's silo gone.
	prev := m.known[n.Name]
	if !left && lease != 0 {
		m.known[n.Name] = clientv3.LeaseID(lease)
		if prev != 0 && prev != clientv3.LeaseID(lease) {
			m.retired[prev] = true
		}
	}
	if left {
		delete(m.alive, n.Name)
	} else {
		m.alive[n.Name] = n.Address()
	}
	close(m.gossipChanged)
	m.gossipChanged = make(chan struct{})
	m.mlMu.Unlock()
	switch {
	case left && lease != 0:
		reason := "declared dead by gossip"
		if n.State == memberlist.StateLeft {
			reason = "left the gossip group"
		}
		m.enqueueRevoke(revokeReq{lease: clientv3.LeaseID(lease), name: n.Name, reason: reason})
	case !left && prev != 0 && lease != 0 && clientv3.LeaseID(lease) != prev:
		m.enqueueRevoke(revokeReq{lease: prev, name: n.Name, reason: "restarted under a new lease", proven: true})
	}
}

func (m *Membership) enqueueRevoke(r revokeReq) {
	r.at = time.Now()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.revokeQ = append(m.revokeQ, r)
	m.mu.Unlock()
	select {
	case m.revokeC <- struct{}{}:
	default:
	}
}

// revokeLoop revokes the leases of silos gossip declared dead. A lease that
// is already gone is a success. Failures are retried until the lease must
// have expired anyway.
func (m *Membership) revokeLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.revokeC:
		}
		for {
			m.mu.Lock()
			if len(m.revokeQ) == 0 {
				m.mu.Unlock()
				break
			}
			r := m.revokeQ[0]
			m.revokeQ = m.revokeQ[1:]
			m.mu.Unlock()
			// Each on its own: one waiting for a healthy majority must not
			// hold up one that is proven.
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.revoke(r)
			}()
		}
	}
}

func (m *Membership) revoke(r revokeReq) {
	if !r.proven {
		// A death that gossip reports about an incarnation the silo
		// refutes (a restarted silo sees its predecessor's leave, and
		// answers it at once) is not a death: the refutation gets
		// revokeGrace to arrive.
		t := time.NewTimer(revokeGrace)
		defer t.Stop()
	grace:
		for {
			m.mlMu.Lock()
			ch := m.gossipChanged
			m.mlMu.Unlock()
			if m.aliveUnder(r.name, r.lease) {
				m.log.Info("not removing a silo gossip declared dead: it is alive again", "member", r.name)
				return
			}
			select {
			case <-m.ctx.Done():
				return
			case <-ch:
			case <-t.C:
				break grace
			}
		}
	}
	backoff := 100 * time.Millisecond
	warned := false
	for {
		select {
		case <-m.fenced:
			return // a fenced silo removes no one
		default:
		}
		if !r.proven && m.aliveUnder(r.name, r.lease) {
			m.log.Info("not removing a silo gossip declared dead: it is alive again", "member", r.name)
			return
		}
		var err error
		if m.mayRevoke(r) {
			ctx, cancel := context.WithTimeout(m.ctx, 3*time.Second)
			_, err = m.client.Revoke(ctx, r.lease)
			cancel()
			switch {
			case err == nil:
				m.log.Info("removed a silo from the view", "member", r.name, "reason", r.reason)
				return
			case isLeaseNotFound(err), m.ctx.Err() != nil:
				return
			}
		} else if !warned {
			warned = true
			m.log.Warn("not removing a silo gossip declared dead yet: this silo does not see a healthy majority of the view, so it may be the one cut off", "member", r.name)
		}
		// Leases are at most a few TTLs long; past that it has expired.
		if time.Since(r.at) > 2*m.cfg.LeaseTTL {
			m.log.Warn("gave up removing a dead silo; its lease expires by itself", "member", r.name, "err", err)
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Suspect is told that the silo-to-silo stream to peerAddr broke. If a
// member of the view has that peer address and it refuses connections, its
// process is gone: its lease is revoked at once, without waiting for gossip
// to declare it dead. (A silo that is only cut off does not refuse, and is
// left to gossip.)
func (m *Membership) Suspect(peerAddr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.suspects[peerAddr] {
		return
	}
	var target MemberInfo
	for _, mi := range m.view.Members {
		if mi.PeerAddr == peerAddr && mi.Name != m.cfg.Name {
			target = mi
		}
	}
	if target.Name == "" {
		return
	}
	if m.suspects == nil {
		m.suspects = make(map[string]bool)
	}
	m.suspects[peerAddr] = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		dead := refused(m.ctx, peerAddr)
		m.mu.Lock()
		delete(m.suspects, peerAddr)
		m.mu.Unlock()
		if dead {
			m.enqueueRevoke(revokeReq{lease: clientv3.LeaseID(target.LeaseID), name: target.Name, reason: "its peer port refuses connections", proven: true})
		}
	}()
}

// revokeGrace is how long a silo waits, after gossip declared another dead,
// before it removes it.
const revokeGrace = 500 * time.Millisecond

// aliveUnder reports whether gossip lists name as alive with lease.
func (m *Membership) aliveUnder(name string, lease clientv3.LeaseID) bool {
	m.mlMu.Lock()
	defer m.mlMu.Unlock()
	return m.alive[name] != "" && m.known[name] == lease
}

// mayRevoke reports whether this silo may remove the silo of r from the view:
// only while it sees a majority of the view alive in gossip, itself
// included, and is healthy itself, or when that silo is proven gone (restarted under a new lease, or
// its peer port refuses connections). So a silo that is cut off from its
// peers, but not from etcd, never removes the healthy majority; the majority
// removes it instead, and it fences itself.
func (m *Membership) mayRevoke(r revokeReq) bool {
	if r.proven {
		return true
	}
	m.mlMu.Lock()
	ml := m.ml
	alive := maps.Clone(m.alive)
	m.mlMu.Unlock()
	v := m.View()
	n := 0
	for _, mi := range v.Members {
		if mi.Name == m.cfg.Name || (mi.Name != r.name && alive[mi.Name] != "") {
			n++
		}
	}
	// Lifeguard's health score rises when this silo's own probes go
	// unanswered even by the peers asked to probe indirectly: the sign of
	// a silo that is cut off itself.
	if 2*n > len(v.Members) && ml != nil && ml.GetHealthScore() == 0 {
		return true
	}
	mi, ok := v.Member(r.name)
	return ok && mi.PeerAddr != "" && refused(m.ctx, mi.PeerAddr)
}

type gossipEvents struct{ m *Membership }

func (e *gossipEvents) NotifyJoin(n *memberlist.Node)   { e.m.noteGossip(n, false) }
func (e *gossipEvents) NotifyUpdate(n *memberlist.Node) { e.m.noteGossip(n, false) }
func (e *gossipEvents) NotifyLeave(n *memberlist.Node)  { e.m.noteGossip(n, true) }

// gossipDelegate publishes the silo's lease ID (hex) as its node metadata.
type gossipDelegate struct{ meta []byte }

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}
func (d *gossipDelegate) NotifyMsg([]byte)                           {}
func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *gossipDelegate) LocalState(join bool) []byte                { return nil }
func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool)     {}

// gossipLog passes memberlist's log lines ("[WARN] memberlist: ...") to slog.
// memberlist's errors are about peers and the network (a dead peer's failed
// pings, a restarted peer's address conflict) and go out as warnings: the
// silo's own trouble shows as fencing.
type gossipLog struct{ log *slog.Logger }

var _ io.Writer = (*gossipLog)(nil)

func (g *gossipLog) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{"[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo, "[WARN]": slog.LevelWarn, "[ERR]": slog.LevelWarn} {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			level, line = l, strings.TrimSpace(rest)
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	g.log.Log(context.Background(), level, line)
	return len(p), nil
}

// expandSeeds turns --join seeds into gossip addresses: IP:port as is, a DNS
// name (with or without a port) to all its addresses; a seed without a port
// gets defaultPort. Names that do not resolve are logged and skipped (a
// headless Service lists only silos that are up).
func expandSeeds(ctx context.Context, r *net.Resolver, seeds []string, defaultPort string, lg *slog.Logger) []string {
	var out []string
	for _, seed := range seeds {
		seed = strings.TrimSpace(seed)
		if seed == "" {
			continue
		}
		host, port, err := net.SplitHostPort(seed)
		if err != nil {
			host, port = strings.Trim(seed, "[]"), defaultPort
		}
		if net.ParseIP(host) != nil {
			out = appendNew(out, net.JoinHostPort(host, port))
			continue
		}
		ips, err := r.LookupHost(ctx, host)
		if err != nil {
			lg.Warn("gossip: cannot resolve seed", "seed", seed, "err", err)
			continue
		}
		for _, ip := range ips {
			out = appendNew(out, net.JoinHostPort(ip, port))
		}
	}
	return out
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func removeAll(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
