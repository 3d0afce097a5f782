package reminders

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Configuration errors are InvalidArgument, from Validate and from New.
func TestConfigErrorsAreInvalidArgument(t *testing.T) {
	cli := &clientv3.Client{} // never used: Validate fails first or does not dial
	for _, tc := range []struct {
		what string
		cfg  Config
	}{
		{"no client", Config{}},
		{"negative period", Config{Client: cli, MinPeriod: -time.Second}},
		{"negative payload", Config{Client: cli, MaxPayload: -1}},
		{"negative concurrency", Config{Client: cli, Concurrency: -1}},
		{"negative timeout", Config{Client: cli, OpTimeout: -time.Second}},
		{"negative page size", Config{Client: cli, PageSize: -1}},
	} {
		if err := tc.cfg.Validate(); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: Validate = %v, want InvalidArgument", tc.what, err)
		}
	}
	if _, err := New(t.Context(), Config{}); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("New without a client = %v, want InvalidArgument", err)
	}
	ok := Config{Client: cli}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate of a config with a client = %v", err)
	}
}
