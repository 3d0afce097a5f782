package cluster

import (
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/grain"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// The startup log names the silo's etcd and state store.
func TestStartupLogNamesStorage(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	var log testutil.SyncBuffer
	c.startWith("s1", func(cfg *SiloConfig, _ *grain.Registry) {
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	want := `msg=storage etcd=` + c.etcd.Endpoint() + ` etcd_prefix=/t/ state_store=etcd`
	if !strings.Contains(log.String(), want) {
		t.Fatalf("the startup log has no %q:\n%s", want, log.String())
	}
}

// A state store's password is not logged.
func TestDescribeStorageRedacts(t *testing.T) {
	for spec, want := range map[string]string{
		"":     "etcd",
		"etcd": "etcd",
		"postgres://agentsilo:s3cret@db:5432/agentsilo":           "postgres://agentsilo:xxxxx@db:5432/agentsilo",
		"postgres://db/agentsilo?user=a&password=s3cret":          "postgres://db/agentsilo?password=xxxxx&user=a",
		"host=db user=agentsilo password=s3cret dbname=agentsilo": "host=db user=agentsilo password=xxxxx dbname=agentsilo",
		"host=db password='s3 cret' dbname=agentsilo":             "host=db password=xxxxx dbname=agentsilo",
	} {
		cfg := DefaultSiloConfig()
		cfg.StateStore = spec
		d := describeStorage(&cfg)
		if got := d[len(d)-1].(string); got != want || strings.Contains(got, "s3") {
			t.Errorf("state store %q logged as %q, want %q", spec, got, want)
		}
	}
	cfg := DefaultSiloConfig()
	if d := describeStorage(&cfg); !strings.HasPrefix(d[1].(string), "embedded on 127.0.0.1:2379 in ./data") {
		t.Errorf("embedded etcd described as %q", d[1])
	}
}
