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

// keys names the etcd keys of reminders: <prefix>reminders/<address>/<name>.
// Neither addresses nor names contain "/", so a key splits unambiguously.
type keys struct{ root string }

func (k keys) of(addr grain.Address, name string) string {
	return k.root + addr.String() + "/" + name
}

func (k keys) agent(addr grain.Address) string { return k.root + addr.String() + "/" }

// parse splits a key into the address and the name.
func (k keys) parse(key string) (grain.Address, string, error) {
	rest, ok := strings.CutPrefix(key, k.root)
	if !ok {
		return grain.Address{}, "", fmt.Errorf("key %q is outside %q", key, k.root)
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return grain.Address{}, "", fmt.Errorf("key %q: want %s<address>/<name>", key, k.root)
	}
	addr, err := grain.ParseAddress(rest[:i])
	if err != nil {
		return grain.Address{}, "", fmt.Errorf("key %q: %w", key, err)
	}
	return addr, rest[i+1:], nil
}
