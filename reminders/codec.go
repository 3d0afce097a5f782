package reminders

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// record is a reminder's value in etcd. The key holds the address and name.
type record struct {
	PeriodMS    int64  `json:"period_ms"`
	MessageType string `json:"message_type,omitempty"`
	Message     string `json:"message,omitempty"`
	DueUnixMS   int64  `json:"due_unix_ms"`
}

func encode(r grain.Reminder) ([]byte, error) {
	return json.Marshal(record{
		PeriodMS:    r.Period.Milliseconds(),
		MessageType: r.MessageType,
		Message:     r.Message,
		DueUnixMS:   r.Due.UnixMilli(),
	})
}

func decode(name string, b []byte) (grain.Reminder, error) {
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return grain.Reminder{}, err
	}
	if rec.PeriodMS <= 0 || rec.PeriodMS > int64(math.MaxInt64/time.Millisecond) {
		return grain.Reminder{}, fmt.Errorf("period_ms %d is out of range", rec.PeriodMS)
	}
	return grain.Reminder{
		Name:        name,
		Period:      time.Duration(rec.PeriodMS) * time.Millisecond,
		MessageType: rec.MessageType,
		Message:     rec.Message,
		Due:         time.UnixMilli(rec.DueUnixMS),
	}, nil
}

// keys names the etcd keys of reminders:
// <prefix>reminder-buckets/<bucket>/<address>/<name>, the bucket in four
// digits (see Bucket). Neither addresses nor names contain "/", so a key
// splits unambiguously. Reminders stored by earlier versions, under
// <prefix>reminders/<address>/<name> (legacy), are moved to their buckets
// (see migrate.go).
type keys struct{ root, legacy string }

func newKeys(prefix string) keys {
	return keys{root: prefix + "reminder-buckets/", legacy: prefix + "reminders/"}
}

func (k keys) of(addr grain.Address, name string) string {
	a := addr.String()
	return k.root + bucketNames[bucketOf(a)] + "/" + a + "/" + name
}

func (k keys) agent(addr grain.Address) string {
	a := addr.String()
	return k.root + bucketNames[bucketOf(a)] + "/" + a + "/"
}

func (k keys) legacyAgent(addr grain.Address) string { return k.legacy + addr.String() + "/" }

// parse splits a key into its bucket, the address and the name; the bucket
// must be the address's.
func (k keys) parse(key string) (int, grain.Address, string, error) {
	rest, ok := strings.CutPrefix(key, k.root)
	b, ok2 := 0, false
	if ok && len(rest) > 5 && rest[4] == '/' {
		b, ok2 = parseBucket(rest[:4])
	}
	if !ok2 {
		return 0, grain.Address{}, "", fmt.Errorf("key %q: want %s<bucket>/<address>/<name>", key, k.root)
	}
	addr, name, err := splitKey(key, rest[5:])
	if err == nil && Bucket(addr) != b {
		err = fmt.Errorf("key %q: %s is not in bucket %d", key, addr, b)
	}
	return b, addr, name, err
}

// parseLegacy splits a key of the legacy layout into the address and the
// name.
func (k keys) parseLegacy(key string) (grain.Address, string, error) {
	rest, ok := strings.CutPrefix(key, k.legacy)
	if !ok {
		return grain.Address{}, "", fmt.Errorf("key %q is outside %q", key, k.legacy)
	}
	return splitKey(key, rest)
}

func splitKey(key, rest string) (grain.Address, string, error) {
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return grain.Address{}, "", fmt.Errorf("key %q: want <address>/<name> after the prefix", key)
	}
	addr, err := grain.ParseAddress(rest[:i])
	if err != nil {
		return grain.Address{}, "", fmt.Errorf("key %q: %w", key, err)
	}
	return addr, rest[i+1:], nil
}
