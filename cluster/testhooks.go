//go:build agentsilo_testhooks

package cluster

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"

	"github.com/agentsilo/agentsilo/internal/faults"
)

// This file is built only with the agentsilo_testhooks tag, for the cluster
// tests (tests/testcluster builds `silo` with it): the production binary has
// no --fault-injection flag and no /debug/partition endpoint (see
// testhooks_off.go).

// testHooksBuilt reports whether this binary was built with the test hooks.
const testHooksBuilt = true

// testFlags defines the test-only flags of `silo` on fs.
func testFlags(fs *flag.FlagSet, cfg *SiloConfig) {
	fs.BoolVar(&cfg.faultInjection, "fault-injection", false, "tests only: serve POST /debug/partition?on=true|false on --http-addr")
}

// testHooks is the fault injection of one silo (package internal/faults):
// a partition switch between the silo and its peers, nil when off.
type testHooks struct {
	f      *faults.Faults
	logger *slog.Logger
}

func newTestHooks(on bool, logger *slog.Logger) testHooks {
	if !on {
		return testHooks{}
	}
	return testHooks{f: faults.New(), logger: logger}
}

// peerListener wraps the peer listener with the partition.
func (h testHooks) peerListener(l net.Listener) net.Listener {
	if h.f == nil {
		return l
	}
	return h.f.Listener(l)
}

// dialOptions are the transport's dial options for the partition.
func (h testHooks) dialOptions() []grpc.DialOption {
	if h.f == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithContextDialer(h.f.Dial)}
}

// gossip puts memberlist's transport behind the partition.
func (h testHooks) gossip(c *memberlist.Config) {
	if h.f == nil {
		return
	}
	t, err := faults.NewGossipTransport(h.f, c.BindAddr, c.BindPort, c)
	if err != nil {
		h.logger.Error("fault injection: gossip transport", "err", err)
		return
	}
	c.Transport = t
}

// mount serves POST /debug/partition?on=true|false on mux.
func (h testHooks) mount(mux *http.ServeMux) {
	if h.f == nil {
		return
	}
	mux.HandleFunc("POST /debug/partition", func(w http.ResponseWriter, req *http.Request) {
		on, err := strconv.ParseBool(req.URL.Query().Get("on"))
		if err != nil {
			http.Error(w, "want ?on=true or ?on=false", http.StatusBadRequest)
			return
		}
		h.f.SetIsolated(on)
		h.logger.Warn("fault injection: partition from peers", "on", on)
		fmt.Fprintln(w, "ok")
	})
}
