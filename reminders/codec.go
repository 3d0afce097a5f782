package reminders

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

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
	rec, ok := decodeRecord(b)
	if !ok {
		// Anything but encode's own output (escapes, another field order,
		// spaces, unknown fields) goes through encoding/json.
		rec = record{}
		if err := json.Unmarshal(b, &rec); err != nil {
			return grain.Reminder{}, err
		}
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

// decodeRecord reads a value exactly as encode writes it, with no escape in
// its strings: {"period_ms":N[,"message_type":"S"][,"message":"S"],"due_unix_ms":N}.
// ok is false for anything else, which decode hands to encoding/json (the
// same result, slower: a silo taking over a bucket decodes every reminder
// in it, and encoding/json was half of that work).
func decodeRecord(b []byte) (rec record, ok bool) {
	p := b
	lit := func(s string) bool {
		if len(p) < len(s) || string(p[:len(s)]) != s {
			return false
		}
		p = p[len(s):]
		return true
	}
	num := func() (int64, bool) {
		i, neg := 0, false
		if i < len(p) && p[i] == '-' {
			neg, i = true, 1
		}
		start := i
		var n int64
		for i < len(p) && p[i] >= '0' && p[i] <= '9' {
			if n > (math.MaxInt64-9)/10 {
				return 0, false
			}
			n = n*10 + int64(p[i]-'0')
			i++
		}
		// encoding/json writes no leading zero and no "-0".
		if i == start || (p[start] == '0' && i-start > 1) || (neg && n == 0) {
			return 0, false
		}
		p = p[i:]
		if neg {
			n = -n
		}
		return n, true
	}
	str := func() (string, bool) {
		for i, c := range p {
			switch {
			case c == '"':
				s := p[:i]
				if !utf8.Valid(s) {
					return "", false
				}
				p = p[i+1:]
				return string(s), true
			case c == '\\', c < 0x20:
				return "", false
			}
		}
		return "", false
	}
	if !lit(`{"period_ms":`) {
		return record{}, false
	}
	if rec.PeriodMS, ok = num(); !ok {
		return record{}, false
	}
	if lit(`,"message_type":"`) {
		if rec.MessageType, ok = str(); !ok || rec.MessageType == "" {
			return record{}, false
		}
	}
	if lit(`,"message":"`) {
		if rec.Message, ok = str(); !ok || rec.Message == "" {
			return record{}, false
		}
	}
	if !lit(`,"due_unix_ms":`) {
		return record{}, false
	}
	if rec.DueUnixMS, ok = num(); !ok || !lit("}") || len(p) != 0 {
		return record{}, false
	}
	return rec, true
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
	a := rest[5:]
	addr, name, err := splitKey(key, a)
	// The address as written in the key is its canonical form (ParseAddress
	// takes Type:owner:alias only), so its bucket is hashed from the key.
	if err == nil && bucketOf(a[:len(a)-len(name)-1]) != b {
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
