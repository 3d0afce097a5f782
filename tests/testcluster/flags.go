package testcluster

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
)

// clusterFlags are the silo flags of a multi-silo cluster. A silo binary
// from before the cluster was wired in lacks them; the harness then runs
// single silos (and says so) instead of failing every test at start.
var clusterFlags = []string{"peer-addr", "gossip-addr", "join", "fault-injection"}

// siloFlags records which of clusterFlags the silo binary has.
type siloFlags map[string]bool

func (f siloFlags) has(name string) bool { return f[name] }

func (f siloFlags) missing() []string {
	var m []string
	for _, name := range clusterFlags {
		if !f[name] {
			m = append(m, "--"+name)
		}
	}
	return m
}

var probed struct {
	mu    sync.Mutex
	bin   string
	flags siloFlags
}

// probeFlags asks the silo binary which cluster flags it has: the ones its
// --help lists, and hidden ones it accepts before --help.
func probeFlags(bin string) (siloFlags, error) {
	probed.mu.Lock()
	defer probed.mu.Unlock()
	if probed.bin == bin {
		return probed.flags, nil
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(help), "-gateway-addr") {
		return nil, fmt.Errorf("testcluster: %s --help lists no flags:\n%s", bin, help)
	}
	flags := siloFlags{}
	for _, name := range clusterFlags {
		if strings.Contains(string(help), "  -"+name+" ") || strings.Contains(string(help), "  -"+name+"\n") {
			flags[name] = true
			continue
		}
		// A hidden flag: accepted (exit 0 with --help) or not (exit 2).
		if exec.Command(bin, "--"+name, "--help").Run() == nil {
			flags[name] = true
		}
	}
	probed.bin, probed.flags = bin, flags
	return flags, nil
}
