package directory

import (
	"encoding/json"
	"testing"
)

// FuzzSpec: no stored or sent entry crashes its checks, and one that
// passes them stores and reads back as itself.
func FuzzSpec(f *testing.F) {
	for _, s := range []string{
		`{"name":"weather","kind":"a2a","url":"https://weather.example.com"}`,
		`{"name":"files","kind":"mcp","url":"http://127.0.0.1:9/mcp","headers":{"Authorization":"Bearer x"},"skills":[{"Name":"read","Tags":["files"]}]}`,
		`{"name":"x","kind":"a2a","url":"https://u:p@x"}`,
		`{"name":"","kind":"","url":""}`,
		`{"name":"x","kind":"a2a","url":"https://x","headers":{"Bad Name":"v\r\n"}}`,
		`[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSpec(b)
		if err != nil {
			return
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeSpec(out)
		if err != nil || again.String() != s.String() || len(again.Headers) != len(s.Headers) || len(again.Skills) != len(s.Skills) {
			t.Fatalf("round trip of %q: %+v, %v", out, again, err)
		}
		r := record{spec: s}
		if e := r.entry(); e.Name != s.Name || e.Call == "" {
			t.Fatalf("entry of %+v: %+v", s, e)
		}
	})
}
