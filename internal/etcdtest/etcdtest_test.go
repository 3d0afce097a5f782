package etcdtest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStart(t *testing.T) {
	srv := Start(t)
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(t.Context(), "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get = %v, %v", resp, err)
	}
	// Stopped, the server is away; restarted, it has the data still.
	srv.Stop()
	srv.Restart()
	resp, err = cli.Get(t.Context(), "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get after a restart = %v, %v", resp, err)
	}
}
