package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// netns is the network of a cluster started with Options.Netns: a bridge in
// the test's namespace with address 10.<a>.<b>.1/24 (etcd and the harness's
// clients are there), and one network namespace per silo, joined to the
// bridge by a veth pair, in which the silo has 10.<a>.<b>.<10+i>. Cutting a
// silo off is then done with nftables rules in its own namespace, so that
// real packets are dropped or rejected.
type netns struct {
	bridge string
	prefix string // "10.a.b."
	names  []string
}

// setupNetns makes the bridge and n namespaces; cleanups registered at
// once delete whatever was made, so nothing leaks when a step fails.
func (c *Cluster) setupNetns(n int) {
	c.tb.Helper()
	need(c.tb, os.Geteuid() == 0, "root (network namespaces and veth pairs)")
	needCommand(c.tb, "ip", "Debian's iproute2 package")
	needCommand(c.tb, "nft", "Debian's nftables package")
	seq := clusterSeq.Load()
	pid := os.Getpid()
	tag := fmt.Sprintf("%x", (pid<<6|int(seq&63))&0xffffff)
	nw := &netns{bridge: "tcb" + tag, prefix: fmt.Sprintf("10.%d.%d.", 100+int(seq%100), pid%256)}
	c.netns = nw
	run := func(args ...string) {
		c.tb.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			c.tb.Fatalf("testcluster: ip %s: %v: %s (network namespaces need root and CAP_NET_ADMIN)", strings.Join(args, " "), err, out)
		}
	}
	run("link", "add", nw.bridge, "type", "bridge")
	c.tb.Cleanup(func() { _ = exec.Command("ip", "link", "del", nw.bridge).Run() })
	run("addr", "add", nw.prefix+"1/24", "dev", nw.bridge)
	run("link", "set", nw.bridge, "up")
	for i := range n {
		name := fmt.Sprintf("agentsilo-tc-%s-%d", tag, i)
		host, peer := fmt.Sprintf("tcv%s-%d", tag, i), fmt.Sprintf("tcp%s-%d", tag, i)
		run("netns", "add", name)
		c.tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
		nw.names = append(nw.names, name)
		run("link", "add", host, "type", "veth", "peer", "name", peer)
		c.tb.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
		run("link", "set", peer, "netns", name)
		run("link", "set", host, "master", nw.bridge)
		run("link", "set", host, "up")
		run("netns", "exec", name, "ip", "link", "set", "lo", "up")
		run("netns", "exec", name, "ip", "addr", "add", nw.siloIP(i)+"/24", "dev", peer)
		run("netns", "exec", name, "ip", "link", "set", peer, "up")
	}
}

func (nw *netns) siloIP(i int) string { return fmt.Sprintf("%s%d", nw.prefix, 10+i) }
func (nw *netns) hostIP() string      { return nw.prefix + "1" }

// Cut is how Cut cuts a silo off.
type Cut int

const (
	// Heal removes the cut.
	Heal Cut = iota
	// Drop drops every packet to and from the silo's peers (its
	// silo-to-silo transport and gossip), both ways: a dead link.
	Drop
	// Reset answers every TCP packet from the silo's peers with a TCP
	// reset and every UDP one with ICMP port unreachable, as a firewall
	// that rejects does: connections to it are refused.
	Reset
	// OneWay drops what the silo's peers send it, and lets what it sends
	// them through: one-way loss.
	OneWay
)

func (k Cut) String() string {
	return [...]string{"heal", "drop", "reset", "one-way loss"}[k]
}

// Cut cuts silo i off from the other silos' addresses for real, with an
// nftables table in its network namespace (Options.Netns): how is Drop,
// Reset or OneWay; Heal removes it. Etcd and the harness's clients (on the
// bridge's address) stay reachable. A cut silo is not Live.
func (c *Cluster) Cut(i int, how Cut) {
	c.tb.Helper()
	if c.netns == nil {
		c.tb.Fatalf("testcluster: Cut needs Options.Netns")
		return
	}
	s := c.Silo(i)
	ns := c.netns.names[i]
	_ = exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "testcluster").Run()
	if how != Heal {
		var peers []string
		for j := range c.silos {
			if j != i {
				peers = append(peers, c.netns.siloIP(j))
			}
		}
		set := "{ " + strings.Join(peers, ", ") + " }"
		in := "ip saddr " + set + " drop"
		out := "ip daddr " + set + " drop"
		switch how {
		case Reset:
			// The resets and ICMP errors the rules send back pass the
			// output chain too: let them out.
			in = "ip saddr " + set + " meta l4proto tcp reject with tcp reset\n\t\tip saddr " + set + " reject"
			out = "ip daddr " + set + " tcp flags & rst == rst accept\n\t\tip daddr " + set + " meta l4proto icmp accept\n\t\t" +
				"ip daddr " + set + " meta l4proto tcp reject with tcp reset\n\t\tip daddr " + set + " reject"
		case OneWay:
			out = ""
		}
		script := fmt.Sprintf("table inet testcluster {\n\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n\t\t%s\n\t}\n\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n\t\t%s\n\t}\n}\n", in, out)
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if b, err := cmd.CombinedOutput(); err != nil {
			c.tb.Fatalf("testcluster: cut %s (%v): nft: %v: %s", s.Name, how, err, b)
			return
		}
	}
	s.mu.Lock()
	s.partitioned = how != Heal
	s.mu.Unlock()
	c.tb.Logf("testcluster: %s: %v", s.Name, how)
}
