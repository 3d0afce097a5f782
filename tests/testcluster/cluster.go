package testcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
)

// Options configures Start.
type Options struct {
	// Silos is the number of silo processes. Default 3.
	Silos int
	// EtcdEndpoints names an etcd to use (for example another cluster's,
	// Cluster.EtcdEndpoints). Empty: start an embedded etcd in this process,
	// closed with the cluster.
	EtcdEndpoints []string
	// EtcdMembers, if positive and EtcdEndpoints is empty, starts an etcd
	// cluster of that many real etcd processes (as StartEtcd does) instead
	// of the embedded etcd: on 127.0.0.<100+i>, or with Netns on the
	// bridge's address (one port pair per member), so that silos in their
	// namespaces reach it. Etcd returns it (to kill its leader).
	EtcdMembers int
	// EtcdPrefix is the silos' --etcd-prefix. Default: a prefix unique to
	// this cluster, so clusters can share an etcd.
	EtcdPrefix string
	// Args are more flags for every silo (such as --idle-timeout 2s); they
	// come after the harness's own and so override them.
	Args []string
	// WaitTimeout bounds each named wait and each stop. Default 60 s.
	WaitTimeout time.Duration
	// NoWait makes Start return once the processes are started, without
	// waiting for them to be ready and to agree on the members.
	NoWait bool
	// StartConcurrency, if positive, starts the silos in a moving window
	// of that many: silo i is started once silo i-StartConcurrency is
	// ready (WaitReady), even with NoWait. A host that cannot run many
	// silos starting at once (each taking its lease, joining the gossip
	// group and loading its share) then does not starve the first ones
	// of their lease renewals. Default 0: all are started at once.
	StartConcurrency int
	// A2A serves A2A on each silo (--a2a-addr Silo.A2AAddr).
	A2A bool
	// MCP serves MCP on each silo (--mcp-addr Silo.MCPAddr).
	MCP bool
	// Netns runs each silo in a network namespace of its own, joined to a
	// bridge in the test's namespace by a veth pair (see Cut), instead of
	// on loopback addresses; the embedded etcd listens on the bridge. It
	// needs root, iproute2 and nftables; without them Start fails the test
	// saying so. The namespaces, links and bridge are deleted when the test
	// ends.
	Netns bool
	// NATS starts a NATS JetStream server (Debian's nats-server) on the
	// harness's address and gives every silo --topic-store with its URL:
	// topics on JetStream. KillNATS and RestartNATS stop it and start it
	// again with what it stored.
	NATS bool
}

// Cluster is a set of silo processes sharing an etcd and a journal. See the
// package doc for which methods may be called concurrently.
type Cluster struct {
	tb        TB
	opts      Options
	bins      Binaries
	dir       string
	journal   string
	endpoints []string
	prefix    string
	etcd      *etcdstore.Store
	etcdc     *EtcdCluster // with Options.EtcdMembers
	nats      *natsServer  // with Options.NATS
	silos     []*Silo
	netns     *netns // with Options.Netns
	http      *http.Client

	mu     sync.Mutex
	lives  map[int]Life // by pid: how each ended silo process lived
	ctl    map[int]*ctlClient
	closed bool
}

// Silo is one silo of a Cluster: its fixed identity and addresses, and its
// current process.
type Silo struct {
	Index int
	// Name is --name: silo-<Index>.
	Name string
	// IP is the loopback address the silo listens on.
	IP string
	// The silo's listen addresses, the same across restarts.
	GatewayAddr, PeerAddr, GossipAddr, HTTPAddr string
	// A2AAddr is the A2A address, with Options.A2A; else empty.
	A2AAddr string
	// MCPAddr is the MCP address, with Options.MCP; else empty.
	MCPAddr string
	// LogPath is the silo's log file, appended to across restarts.
	LogPath string

	c           *Cluster
	mu          sync.Mutex
	proc        *process // the current or last process; nil before the first start
	partitioned bool
}

// process is one run of a silo.
type process struct {
	cmd      *exec.Cmd
	pid      int
	done     chan struct{} // closed when the process has ended
	exitCode int           // after done; -1 if killed by a signal
	exitErr  error         // after done
	exitedAt time.Time     // after done: when the harness saw the end
	frozenAt time.Time     // set by Freeze, cleared by Thaw; under Silo.mu
	freezes  []time.Time   // every Freeze, kept after Thaw; under Silo.mu
}

func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

var clusterSeq atomic.Int64

// Principal is the self-declared principal of the harness's clients (the
// silos' gateways serve loopback without authentication). Agents it owns,
// such as Journal:test:a, are its own, so the gateways' access control lets
// it call them with no rule.
const Principal = "test"

// Start builds the binaries (once), starts etcd unless opts names one,
// starts opts.Silos silo processes and, unless opts.NoWait, waits until each
// is ready and all agree on the members. Everything is stopped when the test
// ends: silos by SIGKILL, then etcd.
func Start(tb TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Silos <= 0 {
		opts.Silos = 3
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = 60 * time.Second
	}
	bins, err := Build()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	c := &Cluster{
		tb:    tb,
		opts:  opts,
		bins:  bins,
		dir:   tb.TempDir(),
		lives: make(map[int]Life),
		ctl:   make(map[int]*ctlClient),
		http:  &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	c.journal = filepath.Join(c.dir, "journal")
	c.prefix = opts.EtcdPrefix
	if c.prefix == "" {
		c.prefix = fmt.Sprintf("/testcluster/%d-%d/", os.Getpid(), clusterSeq.Add(1))
	}
	// Cleanups run last first: the log tails (on failure) print after the
	// silos are stopped, and etcd closes after the silos.
	if opts.Netns {
		c.setupNetns(opts.Silos)
	}
	c.endpoints = opts.EtcdEndpoints
	switch {
	case len(c.endpoints) == 0 && opts.EtcdMembers > 0:
		ip := func(i int) string { return fmt.Sprintf("127.0.0.%d", 100+i) }
		if c.netns != nil {
			host := c.netns.hostIP()
			ip = func(int) string { return host }
		} else {
			need(tb, multiLoopback(), "one loopback address per etcd member (127.0.0.100 and up, as Linux has)")
		}
		c.etcdc = startEtcd(tb, opts.EtcdMembers, ip)
		c.endpoints = c.etcdc.Endpoints()
	case len(c.endpoints) == 0:
		c.startEtcd()
	}
	tb.Cleanup(c.printLogsOnFailure)
	tb.Cleanup(c.close)
	if opts.NATS {
		host := "127.0.0.1"
		if c.netns != nil {
			host = c.netns.hostIP()
		}
		c.startNATS(host)
	}

	// A port just probed and closed may be handed out again: pick again
	// until the addresses are distinct.
	taken := map[string]bool{}
	pick := func(free func(ip string) (string, error), ip string) string {
		for {
			addr, err := free(ip)
			if err != nil {
				tb.Fatalf("%v", err)
			}
			if !taken[addr] {
				taken[addr] = true
				return addr
			}
		}
	}
	for i := range opts.Silos {
		s := &Silo{Index: i, Name: fmt.Sprintf("silo-%d", i), IP: siloIP(i), c: c}
		s.LogPath = filepath.Join(c.dir, s.Name+".log")
		if c.netns != nil {
			// A namespace of its own: every port is free.
			s.IP = c.netns.siloIP(i)
			s.GatewayAddr, s.PeerAddr, s.HTTPAddr, s.GossipAddr = s.IP+":7070", s.IP+":7071", s.IP+":8080", s.IP+":7946"
			if opts.A2A {
				s.A2AAddr = s.IP + ":9090"
			}
			if opts.MCP {
				s.MCPAddr = s.IP + ":9191"
			}
			c.silos = append(c.silos, s)
			continue
		}
		s.GatewayAddr = pick(freeTCP, s.IP)
		s.PeerAddr = pick(freeTCP, s.IP)
		s.HTTPAddr = pick(freeTCP, s.IP)
		s.GossipAddr = pick(freeTCPUDP, s.IP)
		if opts.A2A {
			s.A2AAddr = pick(freeTCP, s.IP)
		}
		if opts.MCP {
			s.MCPAddr = pick(freeTCP, s.IP)
		}
		c.silos = append(c.silos, s)
	}
	for i, s := range c.silos {
		if k := opts.StartConcurrency; k > 0 && i >= k {
			c.WaitReady(i - k)
		}
		if err := s.start(); err != nil {
			tb.Fatalf("testcluster: start %s: %v", s.Name, err)
		}
	}
	if !opts.NoWait {
		for i := range c.silos {
			c.WaitReady(i)
		}
		c.WaitMembers(len(c.silos))
	}
	return c
}

func (c *Cluster) startEtcd() {
	c.tb.Helper()
	ip := "127.0.0.1"
	if c.netns != nil {
		ip = c.netns.hostIP()
	}
	addr, err := freeConsecutive(ip)
	if err != nil {
		c.tb.Fatalf("%v", err)
	}
	logf, err := os.Create(filepath.Join(c.dir, "etcd.log"))
	if err != nil {
		c.tb.Fatalf("testcluster: %v", err)
	}
	ctx, cancel := context.WithTimeout(c.tb.Context(), c.opts.WaitTimeout)
	defer cancel()
	e, err := etcdstore.Start(ctx, etcdstore.Config{
		DataDir:      filepath.Join(c.dir, "etcd"),
		EmbeddedAddr: addr,
		Prefix:       c.prefix,
		Logger:       slog.New(slog.NewJSONHandler(logf, nil)),
	})
	if err != nil {
		logf.Close()
		c.tb.Fatalf("testcluster: embedded etcd: %v", err)
	}
	c.etcd = e
	c.endpoints = []string{"http://" + addr}
	c.tb.Cleanup(func() {
		if err := e.Close(); err != nil {
			c.tb.Logf("testcluster: closing etcd: %v", err)
		}
		logf.Close()
	})
}

// close stops every silo process still running (SIGKILL) and the harness's
// clients.
func (c *Cluster) close() {
	c.mu.Lock()
	c.closed = true
	ctls := c.ctl
	c.ctl = map[int]*ctlClient{}
	c.mu.Unlock()
	for _, cc := range ctls {
		cc.close()
	}
	for _, s := range c.silos {
		p := s.current()
		if p == nil {
			continue
		}
		if p.running() {
			p.cmd.Process.Signal(syscall.SIGKILL)
		}
		<-p.done
	}
	c.http.CloseIdleConnections()
}

// Etcd returns the etcd cluster of Options.EtcdMembers, nil without it.
func (c *Cluster) Etcd() *EtcdCluster { return c.etcdc }

// EtcdEndpoints returns the etcd the silos use, for another cluster
// (Options.EtcdEndpoints) or a direct look.
func (c *Cluster) EtcdEndpoints() []string { return slices.Clone(c.endpoints) }

// EtcdPrefix returns the silos' --etcd-prefix.
func (c *Cluster) EtcdPrefix() string { return c.prefix }

// Dir returns the directory of the logs and the journal.
func (c *Cluster) Dir() string { return c.dir }

// Len returns the number of silos, running or not.
func (c *Cluster) Len() int { return len(c.silos) }

// Silo returns silo i.
func (c *Cluster) Silo(i int) *Silo {
	if i < 0 || i >= len(c.silos) {
		c.tb.Fatalf("testcluster: no silo %d (the cluster has %d)", i, len(c.silos))
		return nil
	}
	return c.silos[i]
}

// Names returns the names of all silos, running or not.
func (c *Cluster) Names() []string {
	names := make([]string, len(c.silos))
	for i, s := range c.silos {
		names[i] = s.Name
	}
	return names
}

// Live returns the indexes of the silos whose process runs and that are
// neither partitioned (Partition) nor frozen (Freeze).
func (c *Cluster) Live() []int {
	var live []int
	for i, s := range c.silos {
		s.mu.Lock()
		ok := s.proc != nil && s.proc.running() && s.proc.frozenAt.IsZero() && !s.partitioned
		s.mu.Unlock()
		if ok {
			live = append(live, i)
		}
	}
	return live
}

// LiveNames returns the names of the Live silos, sorted.
func (c *Cluster) LiveNames() []string {
	var names []string
	for _, i := range c.Live() {
		names = append(names, c.silos[i].Name)
	}
	slices.Sort(names)
	return names
}

// Owner returns the silo that must host addr once the members are the Live
// silos: cluster.Owner over their names.
func (c *Cluster) Owner(addr string) string { return cluster.Owner(addr, c.LiveNames()) }

// Running reports whether silo i's process runs (partitioned or not).
func (c *Cluster) Running(i int) bool {
	p := c.Silo(i).current()
	return p != nil && p.running()
}

// PID returns the pid of silo i's current (or last) process.
func (c *Cluster) PID(i int) int {
	p := c.Silo(i).current()
	if p == nil {
		return 0
	}
	return p.pid
}

func (s *Silo) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

func (s *Silo) args() []string {
	c := s.c
	var join []string
	for _, o := range c.silos {
		if o != s {
			join = append(join, o.GossipAddr)
		}
	}
	args := []string{
		"--name", s.Name,
		"--gateway-addr", s.GatewayAddr,
		"--http-addr", s.HTTPAddr,
		"--etcd-endpoints", strings.Join(c.endpoints, ","),
		"--etcd-prefix", c.prefix,
		"--data-dir", filepath.Join(c.dir, s.Name+"-data"),
		"--log-format", "json",
		"--insecure",
		"--journal", c.journal,
		"--examples",
		"--peer-addr", s.PeerAddr,
		"--gossip-addr", s.GossipAddr,
		"--fault-injection",
	}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	if s.A2AAddr != "" {
		args = append(args, "--a2a-addr", s.A2AAddr)
	}
	if u := c.NATSURL(); u != "" {
		args = append(args, "--topic-store", u)
	}
	if s.MCPAddr != "" {
		args = append(args, "--mcp-addr", s.MCPAddr)
	}
	return append(args, c.opts.Args...)
}

// start starts a new process of s.
func (s *Silo) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && s.proc.running() {
		return fmt.Errorf("%s is still running (pid %d)", s.Name, s.proc.pid)
	}
	logf, err := os.OpenFile(s.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	args := s.args()
	fmt.Fprintf(logf, "=== testcluster %s: %s %s\n", time.Now().Format(time.RFC3339Nano), s.c.bins.Silo, strings.Join(args, " "))
	cmd := exec.Command(s.c.bins.Silo, args...)
	if nw := s.c.netns; nw != nil {
		// ip netns exec enters the namespace and execs the silo: same pid.
		cmd = exec.Command("ip", append([]string{"netns", "exec", nw.names[s.Index], s.c.bins.Silo}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = siloEnv()
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	fmt.Fprintf(logf, "=== testcluster %s: pid %d started\n", time.Now().Format(time.RFC3339Nano), p.pid)
	go func() {
		err := cmd.Wait()
		p.exitedAt = time.Now()
		p.exitErr = err
		p.exitCode = cmd.ProcessState.ExitCode()
		fmt.Fprintf(logf, "=== testcluster %s: pid %d ended: %v\n", p.exitedAt.Format(time.RFC3339Nano), p.pid, cmd.ProcessState)
		logf.Close()
		// A process killed while frozen ran nothing after the freeze: its
		// activations ended then.
		life := Life{Died: p.exitedAt}
		s.mu.Lock()
		if !p.frozenAt.IsZero() {
			life.Died = p.frozenAt
		}
		life.Freezes = slices.Clone(p.freezes)
		s.mu.Unlock()
		s.c.mu.Lock()
		s.c.lives[p.pid] = life
		s.c.mu.Unlock()
		close(p.done)
	}()
	s.proc = p
	s.partitioned = false
	return nil
}

// siloEnv is this process's environment without SILO_* variables, so that
// only the harness's flags configure the silos.
func siloEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SILO_") {
			env = append(env, kv)
		}
	}
	return env
}

// Kill sends SIGKILL to silo i and waits for the process to end.
func (c *Cluster) Kill(i int) {
	c.tb.Helper()
	s := c.Silo(i)
	p := s.current()
	if p == nil || !p.running() {
		c.tb.Fatalf("testcluster: Kill(%d): %s is not running", i, s.Name)
		return
	}
	c.dropCtl(i)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.tb.Fatalf("testcluster: kill %s: %v", s.Name, err)
	}
	<-p.done // SIGKILL cannot be caught: the wait is short
	c.tb.Logf("testcluster: killed %s (pid %d)", s.Name, p.pid)
}

// Freeze stops silo i's process with SIGSTOP: it runs nothing and answers
// nothing, but its sockets stay open, as on a hung host, in a long GC or VM
// pause, or behind a cut network (unlike Kill, whose refused connections
// tell the peers at once). A frozen silo is not Live. For the journal
// checker, its activations from before the freeze live on after it only as
// far as their journal lines show (see Life).
func (c *Cluster) Freeze(i int) {
	c.tb.Helper()
	c.signal(i, syscall.SIGSTOP, true)
}

// Thaw resumes a silo frozen by Freeze (SIGCONT).
func (c *Cluster) Thaw(i int) {
	c.tb.Helper()
	c.signal(i, syscall.SIGCONT, false)
}

func (c *Cluster) signal(i int, sig syscall.Signal, freeze bool) {
	c.tb.Helper()
	s := c.Silo(i)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || !p.running() {
		c.tb.Fatalf("testcluster: %v to %s: not running", sig, s.Name)
		return
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.tb.Fatalf("testcluster: %v to %s: %v", sig, s.Name, err)
	}
	if freeze {
		ctx, cancel := context.WithTimeout(c.tb.Context(), c.opts.WaitTimeout)
		defer cancel()
		if err := waitStopped(ctx, p.pid); err != nil {
			c.tb.Fatalf("testcluster: waiting for %s (pid %d) to stop: %v", s.Name, p.pid, err)
		}
		p.frozenAt = time.Now()
		p.freezes = append(p.freezes, p.frozenAt)
		mark(s.LogPath, p.frozenAt, p.pid, "frozen")
	} else {
		p.frozenAt = time.Time{}
		mark(s.LogPath, time.Now(), p.pid, "thawed")
	}
	c.tb.Logf("testcluster: %v to %s (pid %d)", sig, s.Name, p.pid)
}

// mark appends a harness line to a silo's log (see CheckDir): the process
// appends to the same file, a line at a time.
func mark(path string, at time.Time, pid int, what string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "=== testcluster %s: pid %d %s\n", at.Format(time.RFC3339Nano), pid, what)
	f.Close()
}

// Stop sends SIGTERM to silo i, waits for it to exit (bounded by
// Options.WaitTimeout) and fails the test unless it exits 0.
func (c *Cluster) Stop(i int) {
	c.tb.Helper()
	s := c.Silo(i)
	p := s.current()
	if p == nil || !p.running() {
		c.tb.Fatalf("testcluster: Stop(%d): %s is not running", i, s.Name)
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		c.tb.Fatalf("testcluster: SIGTERM %s: %v", s.Name, err)
	}
	if code := c.WaitExited(i); code != 0 {
		c.tb.Errorf("testcluster: %s exited %d after SIGTERM, want 0", s.Name, code)
	}
}

// Restart starts silo i again, with the same name and addresses, after it
// was killed, stopped or exited by itself, and waits until it is ready.
func (c *Cluster) Restart(i int) {
	c.tb.Helper()
	s := c.Silo(i)
	if err := s.start(); err != nil {
		c.tb.Fatalf("testcluster: restart %s: %v", s.Name, err)
	}
	c.WaitReady(i)
}

// Partition cuts silo i off from its peers (silo-to-silo transport and
// gossip; not from etcd or clients) with on, and heals it with !on, through
// the silo's fault-injection endpoint. A partitioned silo is not Live.
func (c *Cluster) Partition(i int, on bool) {
	c.tb.Helper()
	s := c.Silo(i)
	url := fmt.Sprintf("http://%s/debug/partition?on=%t", s.HTTPAddr, on)
	resp, err := c.http.Post(url, "text/plain", nil)
	if err != nil {
		c.tb.Fatalf("testcluster: partition %s: %v", s.Name, err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.tb.Fatalf("testcluster: POST %s: %s", url, resp.Status)
	}
	s.mu.Lock()
	s.partitioned = on
	s.mu.Unlock()
	c.tb.Logf("testcluster: partition %s: %t", s.Name, on)
}

// Client returns an SDK client to the gateways of the silos given (all
// silos if none), closed when the test ends.
func (c *Cluster) Client(tb TB, silos ...int) *client.Client {
	tb.Helper()
	if len(silos) == 0 {
		for i := range c.silos {
			silos = append(silos, i)
		}
	}
	var addrs []string
	for _, i := range silos {
		addrs = append(addrs, c.Silo(i).GatewayAddr)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), c.opts.WaitTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, addrs, client.WithPrincipal(Principal))
	if err != nil {
		tb.Fatalf("testcluster: dial %v: %v", addrs, err)
		return nil
	}
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// Journal returns the path of the journal the silos' Journal agents write.
func (c *Cluster) Journal() string { return c.journal }

// Lives returns, by pid, how each silo process lived, for ReadJournal: the
// ended ones, and the fences (from the silos' logs) and last freeze of
// those still running.
func (c *Cluster) Lives() map[int]Life {
	c.mu.Lock()
	lives := maps.Clone(c.lives)
	c.mu.Unlock()
	for _, s := range c.silos {
		fences, suspended := fencesIn(s.LogPath)
		for pid, f := range fences {
			l := lives[pid]
			l.Fenced = f
			lives[pid] = l
		}
		for pid, since := range suspended {
			if l, ok := lives[pid]; ok && !l.Died.IsZero() {
				l.Suspended = since
				lives[pid] = l
			}
		}
		s.mu.Lock()
		if p := s.proc; p != nil && p.running() && len(p.freezes) > 0 {
			l := lives[p.pid]
			l.Freezes = slices.Clone(p.freezes)
			lives[p.pid] = l
		}
		s.mu.Unlock()
	}
	return lives
}

// printLogsOnFailure prints the tail of every silo's log if the test failed.
func (c *Cluster) printLogsOnFailure() {
	if !c.tb.Failed() {
		return
	}
	for _, s := range c.silos {
		c.tb.Logf("testcluster: last lines of %s:\n%s", s.LogPath, tail(s.LogPath, 40))
	}
}

// LogTail returns the last n lines of silo i's log.
func (c *Cluster) LogTail(i, n int) string { return tail(c.Silo(i).LogPath, n) }

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
