package testcluster

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
)

// Reject makes silo i's peer and gossip TCP ports answer every packet from
// its peers with a TCP reset (on), as a firewall that rejects with tcp-reset
// does, or as a peer listener that failed in a process that still runs:
// connections to them are refused and established ones break. Gossip's UDP
// probes still pass, and the silo still reaches etcd and clients. The rule
// lives in an nftables table of this cluster's own, deleted with !on and
// when the test ends. It needs the nft command (Debian's nftables package)
// and root; without them a test skips (fails under CI) saying so. A
// rejected silo stays Live.
func (c *Cluster) Reject(i int, on bool) {
	c.tb.Helper()
	s := c.Silo(i)
	table := fmt.Sprintf("testcluster_%d_%s", os.Getpid(), strings.NewReplacer("/", "_", "-", "_").Replace(strings.Trim(c.prefix, "/")))
	if !on {
		if err := nft("delete", "table", "inet", table); err != nil {
			c.tb.Fatalf("testcluster: unreject %s: %v", s.Name, err)
		}
		c.tb.Logf("testcluster: %s's peer ports accept again", s.Name)
		return
	}
	need(c.tb, os.Geteuid() == 0, "root (nftables rules)")
	needCommand(c.tb, "nft", "Debian's nftables package")
	_, peerPort, _ := net.SplitHostPort(s.PeerAddr)
	_, gossipPort, _ := net.SplitHostPort(s.GossipAddr)
	rules := fmt.Sprintf(`table inet %[1]s {
	chain input {
		type filter hook input priority -10; policy accept;
		ip daddr %[2]s tcp dport { %[3]s, %[4]s } ip saddr != %[2]s reject with tcp reset
	}
}
`, table, s.IP, peerPort, gossipPort)
	if err := nftScript(rules); err != nil {
		c.tb.Fatalf("testcluster: Reject(%d): nft (needs root and nf_tables): %v", i, err)
		return
	}
	c.tb.Cleanup(func() { _ = nft("delete", "table", "inet", table) })
	c.tb.Logf("testcluster: %s's peer and gossip TCP ports answer with resets", s.Name)
}

func nft(args ...string) error {
	out, err := exec.Command("nft", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func nftScript(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, out)
	}
	return nil
}
