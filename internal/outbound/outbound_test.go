package outbound

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestBlocked(t *testing.T) {
	for _, c := range []struct {
		ip      string
		blocked bool
	}{
		{"127.0.0.1", true}, {"::1", true}, {"10.1.2.3", true}, {"172.16.0.1", true},
		{"192.168.1.1", true}, {"169.254.169.254", true}, {"100.64.0.1", true},
		{"0.0.0.0", true}, {"224.0.0.1", true}, {"fe80::1", true}, {"fc00::1", true},
		{"8.8.8.8", false}, {"100.128.0.1", false}, {"2001:4860::8888", false},
	} {
		if got := Blocked(net.ParseIP(c.ip)); got != c.blocked {
			t.Errorf("Blocked(%s) = %v, want %v", c.ip, got, c.blocked)
		}
	}
}

// A loopback server is refused unless private networks are allowed, and
// the headers and the body limit apply.
func TestTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Key")+strings.Repeat("x", 100))
	}))
	defer srv.Close()

	guarded := &http.Client{Transport: Transport(false)}
	if _, err := guarded.Get(srv.URL); !errors.Is(err, ErrBlocked) {
		t.Fatalf("loopback through the guard: %v, want ErrBlocked", err)
	}

	tr := Transport(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: &LimitBody{Max: 10, Base: &Headers{Base: tr, Header: http.Header{"X-Key": {"k1"}}}}}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "k1xxxxxxxx" {
		t.Fatalf("body %q, want the header's value and 8 bytes more (10 in all)", b)
	}
}
