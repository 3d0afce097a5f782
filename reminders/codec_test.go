package reminders

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// FuzzDecode: whatever etcd holds under a reminder key, decoding it never
// panics, and what it accepts is a usable reminder that round-trips.
func FuzzDecode(f *testing.F) {
	good, _ := encode(grain.Reminder{Name: "tick", Period: time.Minute, MessageType: "tick", Message: "hi", Due: time.UnixMilli(1_800_000_000_000)})
	for _, seed := range [][]byte{good, []byte(`{}`), []byte(`{"period_ms":-1}`), []byte(`{"period_ms":9223372036854775807}`), []byte(`null`), nil} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode("tick", b)
		if err != nil {
			return
		}
		if r.Period <= 0 {
			t.Fatalf("decode(%q) accepted period %v", b, r.Period)
		}
		again, err := encode(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decode("tick", again)
		if err != nil || r2.Period != r.Period || r2.Message != r.Message || r2.MessageType != r.MessageType || !r2.Due.Equal(r.Due) {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", b, r2, err, r)
		}
	})
}

// FuzzParseKey: a key that parses names a valid address in its bucket, and
// the key is rebuilt from its parts; so does a key of the legacy layout.
func FuzzParseKey(f *testing.F) {
	k := newKeys("/agentsilo/")
	for _, seed := range []string{"/agentsilo/reminder-buckets/0377/Echo:a:b/tick", "/agentsilo/reminder-buckets/0000/Echo:a:b/tick",
		"/agentsilo/reminders/Echo:a:b/tick", "/agentsilo/reminders/Echo:a:b/", "/other/x", "/agentsilo/reminders/Echo:a/t", "/agentsilo/reminders//"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		valid := func(addr grain.Address, name string) bool {
			return grain.ValidType(addr.Type) && grain.ValidName(addr.Owner) && grain.ValidName(addr.Alias) && !strings.Contains(name, "/")
		}
		if b, addr, name, err := k.parse(key); err == nil {
			if !valid(addr, name) || b != Bucket(addr) {
				t.Fatalf("parse(%q) = %d, %v, %q", key, b, addr, name)
			}
			if got := k.of(addr, name); got != key {
				t.Fatalf("parse(%q) rebuilt as %q", key, got)
			}
		}
		if addr, name, err := k.parseLegacy(key); err == nil {
			if !valid(addr, name) {
				t.Fatalf("parseLegacy(%q) = %v, %q", key, addr, name)
			}
			if got := k.legacyAgent(addr) + name; got != key {
				t.Fatalf("parseLegacy(%q) rebuilt as %q", key, got)
			}
		}
	})
}

// FuzzDecodeRecord: what the fast path accepts, encoding/json reads the
// same; and encode's output always takes the fast path unless a string
// needed an escape.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []grain.Reminder{
		{Period: time.Minute, Due: time.UnixMilli(1_800_000_000_000)},
		{Period: time.Millisecond, MessageType: "tick", Message: "hi there", Due: time.UnixMilli(-5)},
		{Period: time.Hour, Message: "é ☃ <b>&", Due: time.UnixMilli(0)},
		{Period: time.Hour, MessageType: "a\"b", Message: "line\nbreak", Due: time.UnixMilli(7)},
	} {
		b, _ := encode(r)
		f.Add(b)
	}
	for _, s := range []string{`{"period_ms":01,"due_unix_ms":1}`, `{"period_ms":1,"due_unix_ms":-0}`, `{"period_ms":1,"message":"","due_unix_ms":1}`,
		`{"period_ms":99999999999999999999,"due_unix_ms":1}`, `{"period_ms":1,"due_unix_ms":1} `, `{"period_ms":1,"message_type":"\xff","due_unix_ms":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, ok := decodeRecord(b)
		if ok {
			var want record
			if err := json.Unmarshal(b, &want); err != nil || want != rec {
				t.Fatalf("decodeRecord(%q) = %+v; encoding/json: %+v, %v", b, rec, want, err)
			}
		}
		var r record
		if json.Unmarshal(b, &r) != nil {
			return
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := decodeRecord(again); !strings.Contains(string(again), `\`) && (!ok || got != r) {
			t.Fatalf("decodeRecord(%q) = %+v, %v; want the fast path to read %+v", again, got, ok, r)
		}
	})
}
