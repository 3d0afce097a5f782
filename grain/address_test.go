package grain

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/errs"
)

func TestParseAddress(t *testing.T) {
	good := []struct {
		in, owner string
		want      Address
	}{
		{"Support:acme:ticket-42", "", Address{"Support", "acme", "ticket-42"}},
		{"Echo:hello", "alice", Address{"Echo", "alice", "hello"}},
		{"a.B_c-1:x@y.z:0", "", Address{"a.B_c-1", "x@y.z", "0"}},
		{"Echo:system:shared", "bob", Address{"Echo", "system", "shared"}},
	}
	for _, tc := range good {
		got, err := Resolve(tc.in, tc.owner)
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%q, %q) = %v, %v; want %v", tc.in, tc.owner, got, err, tc.want)
		}
		if tc.owner == "" && got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
	bad := []struct{ in, owner, part string }{
		{"", "a", "want Type"},
		{"Echo", "a", "want Type"},
		{"Echo:x", "", "relative"},
		{"1Echo:a:b", "", "bad type"},
		{"Echo:-a:b", "", "bad owner"},
		{"Echo:a:b c", "", "bad alias"},
		{"Echo:a:b:c", "", "too many colons"},
		{"Echo::b", "", "bad owner"},
		{"Echo:a:", "", "bad alias"},
		{strings.Repeat("T", 65) + ":a:b", "", "bad type"},
		{"Echo:a:" + strings.Repeat("x", 129), "", "bad alias"},
	}
	for _, tc := range bad {
		_, err := Resolve(tc.in, tc.owner)
		if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.part) {
			t.Errorf("Resolve(%q, %q) = %v; want InvalidArgument naming %q", tc.in, tc.owner, err, tc.part)
		}
	}
}

func FuzzResolve(f *testing.F) {
	for _, s := range []string{"Support:acme:ticket-42", "Echo:x", "::", "a:b:c:d", "Echo:a@b:c.d", "\xff:\x00:x"} {
		f.Add(s, "owner")
	}
	f.Fuzz(func(t *testing.T, s, owner string) {
		a, err := Resolve(s, owner)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalidArgument) {
				t.Fatalf("Resolve(%q) error %v is not InvalidArgument", s, err)
			}
			return
		}
		// A parsed address round-trips through its canonical form.
		b, err := ParseAddress(a.String())
		if err != nil || b != a {
			t.Fatalf("round trip of %q: %v, %v", a.String(), b, err)
		}
		if !ValidType(a.Type) || !ValidName(a.Owner) || !ValidName(a.Alias) {
			t.Fatalf("Resolve(%q) accepted invalid parts %#v", s, a)
		}
	})
}
