// Command coredns is CoreDNS with the plugins the tests of deploy/k8s use:
// the cluster's DNS (kubernetes), answering names as a cluster's DNS
// Service does, with errors and log. The other plugins of a full CoreDNS
// build are left out so that it builds quickly.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func main() {
	// The order the plugins run in, as in CoreDNS's plugin.cfg.
	dnsserver.Directives = []string{"bind", "errors", "log", "kubernetes"}
	coremain.Run()
}
