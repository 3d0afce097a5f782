package membership

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// A silo started without the cluster's security settings (peer mutual TLS,
// its CA, the gossip key) cannot talk to the others: its streams fail their
// TLS handshake and its gossip is dropped. Were it admitted to the view, it
// would own a share of the addresses, and every call routed to it would wait
// out its deadline. So each record carries a Security fingerprint, and:
//
//   - a silo leaves out of its view every member whose fingerprint does not
//     match its own (logging once, as an error, what differs), so it routes
//     nothing to it;
//   - a silo whose fingerprint does not match that of a member registered
//     before it refuses to start (Start returns ErrSecurityMismatch, saying
//     what differs), and its record goes with its lease.
//
// The cluster's settings are thus those of its oldest members; a silo that
// joins later with other settings is refused, whichever of them is right.
// Settings match when both sides have peer TLS or neither has, with a CA
// certificate in common, and both encrypt gossip or neither does, each
// with a first key (the one it encrypts with) the other has: the steps of a
// rotation (add the new CA or key everywhere, move over, drop the old one)
// keep every pair matching. The record follows the
// files as the silo reloads them. A record without a fingerprint (a silo of
// an older version) is not judged.

// ErrSecurityMismatch is the error of a Start refused because the silo's
// security settings do not match the cluster's.
var ErrSecurityMismatch = errs.New(codes.FailedPrecondition, "membership: this silo's security settings do not match the cluster's")

// Security is what a silo's record says of how it talks to its peers:
// fingerprints, never the keys or certificates themselves. It is
// comparable with ==.
type Security struct {
	// Known: the record carries a fingerprint (false in the record of a
	// silo of an older version, which is not judged).
	Known bool `json:"known"`
	// PeerTLS: the peer port serves mutual TLS.
	PeerTLS bool `json:"peer_tls"`
	// PeerCAs are the fingerprints of the CA certificates the silo takes
	// its peers' certificates from (sha256 of each certificate, 16 hex
	// digits), comma-separated.
	PeerCAs string `json:"peer_cas,omitempty"`
	// GossipKeys are the fingerprints of the gossip keys, comma-separated,
	// the one gossip is encrypted with first; none: gossip in the clear.
	GossipKeys string `json:"gossip_keys,omitempty"`
}

// list splits a comma-separated list of fingerprints.
func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// String describes s for a log line or an error.
func (s Security) String() string {
	var b strings.Builder
	if s.PeerTLS {
		fmt.Fprintf(&b, "peer TLS on (CA %s)", s.PeerCAs)
	} else {
		b.WriteString("peer TLS off")
	}
	if s.GossipKeys != "" {
		fmt.Fprintf(&b, ", gossip encrypted (key %s)", s.GossipKeys)
	} else {
		b.WriteString(", gossip in the clear")
	}
	return b.String()
}

// Mismatch says what keeps a silo with settings s and one with settings
// o from talking to each other, "" if nothing does.
func (s Security) Mismatch(o Security) string {
	var why []string
	switch {
	case s.PeerTLS != o.PeerTLS:
		why = append(why, fmt.Sprintf("peer TLS is %s here and %s there (--peer-tls-cert, --peer-tls-key, --peer-tls-ca)", onOff(s.PeerTLS), onOff(o.PeerTLS)))
	case s.PeerTLS && !shareOne(list(s.PeerCAs), list(o.PeerCAs)):
		why = append(why, fmt.Sprintf("no peer CA in common (--peer-tls-ca: %s here, %s there)", s.PeerCAs, o.PeerCAs))
	}
	sk, ok := list(s.GossipKeys), list(o.GossipKeys)
	switch a, b := len(sk) > 0, len(ok) > 0; {
	case a != b:
		why = append(why, fmt.Sprintf("gossip is %s here and %s there (--gossip-key-file)", encrypted(a), encrypted(b)))
	case a && (!slices.Contains(ok, sk[0]) || !slices.Contains(sk, ok[0])):
		why = append(why, fmt.Sprintf("the gossip keys do not match: each silo's first key must be one the other has (--gossip-key-file: %s here, %s there)", s.GossipKeys, o.GossipKeys))
	}
	return strings.Join(why, "; ")
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func encrypted(on bool) string {
	if on {
		return "encrypted"
	}
	return "in the clear"
}

func shareOne(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// fingerprint is the short fingerprint of b: 16 hex digits of its sha256.
func fingerprint(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// gossipKeyFingerprint is the fingerprint of a gossip key. The key is
// random (16 to 32 bytes), so its hash, in a record anyone who reads etcd
// can read, tells nothing of it.
func gossipKeyFingerprint(key []byte) string {
	return fingerprint(append([]byte("agentsilo gossip key\x00"), key...))
}

// caFingerprints reads a PEM file of CA certificates and returns their
// fingerprints.
func caFingerprints(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("membership: peer CA file: %w", err)
	}
	var out []string
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return nil, fmt.Errorf("membership: peer CA file %s: %w", path, err)
		}
		out = append(out, fingerprint(blk.Bytes))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("membership: peer CA file %s holds no certificate", path)
	}
	return out, nil
}

// readSecurity makes the silo's fingerprint from its files.
func (m *Membership) readSecurity() (Security, error) {
	sec := Security{Known: true}
	if m.cfg.PeerCAFile != "" {
		cas, err := caFingerprints(m.cfg.PeerCAFile)
		if err != nil {
			return Security{}, err
		}
		sec.PeerTLS, sec.PeerCAs = true, strings.Join(cas, ",")
	}
	if m.keys != nil {
		var keys []string
		for _, k := range m.keys.ring.GetKeys() { // the primary first
			keys = append(keys, gossipKeyFingerprint(k))
		}
		sec.GossipKeys = strings.Join(keys, ",")
	}
	return sec, nil
}

// Security returns the silo's security fingerprint as its record says it.
func (m *Membership) Security() Security { return *m.sec.Load() }

// record returns the silo's record, leaving or not.
func (m *Membership) record(leaving bool) Member {
	r := m.self
	r.Security = m.Security()
	r.Leaving = leaving
	switch m.unreach.Load() {
	case unreachMarked:
		r.Unreachable = true
	case unreachDrained:
		r.Unreachable, r.Drained = true, true
	}
	return r
}

// admit reports whether mi may be in this silo's view: its security
// settings match this silo's. The first time a record is refused, it
// logs why. Called on the watch goroutine only.
func (m *Membership) admit(mi Member) bool {
	if mi.Name == m.cfg.Name || !mi.Security.Known {
		return true
	}
	why := m.Security().Mismatch(mi.Security)
	if why == "" {
		return true
	}
	if !m.refused[mi.LeaseID] {
		m.refused[mi.LeaseID] = true
		m.log.Error("a silo is kept out of the view: its security settings do not match this silo's, so the two cannot talk; start it with the cluster's",
			"member", mi.Name, "peer_addr", mi.PeerAddr, "mismatch", why, "here", m.Security().String(), "there", mi.Security.String())
	}
	return false
}

// checkOlder refuses this silo if a member whose record was created before
// revision rev (this silo's own record's) has security settings that do
// not match its own.
func (m *Membership) checkOlder(ctx context.Context, rev int64) error {
	resp, err := m.client.Get(ctx, m.dir, clientv3.WithPrefix())
	if err != nil {
		return etcderr.FromCall(ctx, err, "membership: read the members")
	}
	own := m.Security()
	for _, kv := range resp.Kvs {
		var mi Member
		if kv.CreateRevision >= rev || json.Unmarshal(kv.Value, &mi) != nil || mi.Leaving || !mi.Security.Known || mi.Name == m.cfg.Name {
			continue
		}
		if why := own.Mismatch(mi.Security); why != "" {
			m.log.Error("refusing to join: this silo's security settings do not match the cluster's", "member", mi.Name, "mismatch", why, "here", own.String(), "there", mi.Security.String())
			return fmt.Errorf("%w: silo %q, in the cluster before this one, cannot talk to it: %s; start this silo with the cluster's settings", ErrSecurityMismatch, mi.Name, why)
		}
	}
	return nil
}

// refreshSecurity reads the silo's fingerprint again (its CA or key file
// changed) and, if it changed, writes it into the silo's record.
func (m *Membership) refreshSecurity() {
	sec, err := m.readSecurity()
	if err != nil {
		m.log.Warn("security fingerprint not read again; the record keeps the old one", "err", err)
		return
	}
	if m.Security() == sec {
		return
	}
	m.sec.Store(&sec)
	m.mu.Lock()
	leaving, joined := m.leaving, m.selfSeen
	m.mu.Unlock()
	if !joined {
		return // Start writes the record with it
	}
	rec, err := json.Marshal(m.record(leaving))
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
	defer cancel()
	if _, err := m.client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(m.key), "=", m.lease)).
		Then(clientv3.OpPut(m.key, string(rec), clientv3.WithLease(m.lease))).Commit(); err != nil {
		m.log.Warn("security fingerprint not written to the record", "err", err)
		return
	}
	m.log.Info("security fingerprint of the record updated", "security", sec.String())
}

// wasRefused reports whether prev, a deleted record, was kept out of the
// view by admit. Called on the watch goroutine only.
func (m *Membership) wasRefused(prev *mvccpb.KeyValue) bool {
	if prev == nil {
		return false
	}
	var mi Member
	return json.Unmarshal(prev.Value, &mi) == nil && m.refused[mi.LeaseID]
}
