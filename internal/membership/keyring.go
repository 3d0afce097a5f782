package membership

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Gossip is encrypted (AES-GCM) and authenticated with memberlist's key
// ring when Config.KeyFile is set: a file of base64 keys of 16, 24 or 32
// bytes, one a line (blank lines and lines starting with # are skipped),
// the first being the one gossip is encrypted with, the others accepted
// too. Gossip without a key from the ring is dropped.
//
// The file is read again when it changes (looked at every keyringCheck), so
// a key is rotated without a restart, in three rollouts of the file to
// every silo: add the new key as a second line; move it first; remove the
// old one.

// keyringCheck is how often the key file is looked at.
const keyringCheck = 5 * time.Second

// ReadKeyFile reads a gossip key file: its keys, the first one first.
func ReadKeyFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("membership: gossip key file: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("membership: gossip key file %s, line %d: not base64: %w", path, i+1, err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("membership: gossip key file %s, line %d: a key of %d bytes; want 16, 24 or 32", path, i+1, n)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("membership: gossip key file %s holds no key", path)
	}
	return keys, nil
}

// keyring is the gossip key ring and the file it follows.
type keyring struct {
	path  string
	ring  *memberlist.Keyring
	stamp fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}
}

func newKeyring(path string) (*keyring, error) {
	st := stampOf(path)
	keys, err := ReadKeyFile(path)
	if err != nil {
		return nil, err
	}
	ring, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("membership: gossip keys: %w", err)
	}
	return &keyring{path: path, ring: ring, stamp: st}, nil
}

// reload makes the ring what the file says, if the file changed: its keys,
// the first one primary. It reports whether the ring changed.
func (k *keyring) reload() (bool, error) {
	st := stampOf(k.path)
	if st == k.stamp {
		return false, nil
	}
	keys, err := ReadKeyFile(k.path)
	if err != nil {
		return false, err // a file half-written: try again at the next look
	}
	k.stamp = st
	for _, key := range keys {
		if err := k.ring.AddKey(key); err != nil {
			return false, err
		}
	}
	if err := k.ring.UseKey(keys[0]); err != nil {
		return false, err
	}
	for _, old := range k.ring.GetKeys() {
		keep := false
		for _, key := range keys {
			keep = keep || bytes.Equal(old, key)
		}
		if !keep {
			if err := k.ring.RemoveKey(old); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// keyringLoop follows the key file, and the peer CA file, until the
// membership closes, keeping the record's security fingerprint true.
func (m *Membership) keyringLoop() {
	defer m.wg.Done()
	t := time.NewTicker(keyringCheck)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		if m.keys != nil {
			changed, err := m.keys.reload()
			switch {
			case err != nil:
				m.log.Warn("gossip key file not reloaded; the keys in use stay", "file", m.keys.path, "err", err)
			case changed:
				m.log.Info("gossip keys reloaded", "file", m.keys.path, "keys", len(m.keys.ring.GetKeys()))
			}
		}
		m.refreshSecurity()
	}
}
