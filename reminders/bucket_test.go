package reminders

import (
	"sync"
	"testing"

	"github.com/agentsilo/agentsilo/grain"
)

// The bucket of an address is part of the stored format: a change would
// strand every stored reminder in a bucket nobody loads for it.
func TestBucketPinned(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want int
	}{
		{"Echo:a:b", 377},
		{"Ticker:acme:t1", 378},
		{"Ticker:acme:t2", 999},
		{"Counter:ops:x", 383},
	} {
		a, err := grain.ParseAddress(tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := Bucket(a); got != tc.want {
			t.Errorf("Bucket(%s) = %d, want %d", tc.addr, got, tc.want)
		}
	}
	if BucketName(42) != "reminders/0042" || Buckets != 1024 {
		t.Errorf("BucketName(42) = %q, Buckets = %d", BucketName(42), Buckets)
	}
}

// testView is a cluster's view for tests: set changes it (a new version),
// and the Services given get follow it once told by Rebalance.
type testView struct {
	mu sync.Mutex
	v  View
}

func newTestView(owns func(b int) bool) *testView {
	return &testView{v: View{Version: 1, Owns: owns}}
}

func (tv *testView) get() View {
	tv.mu.Lock()
	defer tv.mu.Unlock()
	return tv.v
}

func (tv *testView) set(owns func(b int) bool) {
	tv.mu.Lock()
	defer tv.mu.Unlock()
	tv.v = View{Version: tv.v.Version + 1, Owns: owns}
}
