package membership

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
