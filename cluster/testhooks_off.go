//go:build !agentsilo_testhooks

package cluster

import (
	"flag"
	"log/slog"
	"net"
	"net/http"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"
)

// The production build: no test hooks (see testhooks.go, built with the
// agentsilo_testhooks tag). Each hook leaves what it is given as it is.

const testHooksBuilt = false

func testFlags(*flag.FlagSet, *SiloConfig) {}

type testHooks struct{}

func newTestHooks(bool, *slog.Logger) testHooks { return testHooks{} }

func (testHooks) peerListener(l net.Listener) net.Listener { return l }

func (testHooks) dialOptions() []grpc.DialOption { return nil }

func (testHooks) gossip(*memberlist.Config) {}

func (testHooks) mount(*http.ServeMux) {}
