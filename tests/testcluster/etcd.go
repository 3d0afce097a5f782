package testcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdCluster is an etcd cluster of real etcd processes (Debian's
// etcd-server package: the etcd binary on PATH), one member per loopback
// address 127.0.0.<100+i> (or all on a netns bridge's address, through
// Options.EtcdMembers), for tests of etcd failures: kill its leader and
// restart it, freeze every member (an outage: connections hang, nothing is
// refused). Give Endpoints to Options.EtcdEndpoints. The members are killed when the
// test ends. Its controls must be called from the test's goroutine.
type EtcdCluster struct {
	tb      TB
	dir     string
	members []*etcdMember
	timeout time.Duration
}

type etcdMember struct {
	name, client, peer string
	bin                string
	args               []string
	mu                 sync.Mutex // guards cmd and done, replaced by Restart
	cmd                *exec.Cmd
	done               chan struct{}
}

// StartEtcd starts an etcd cluster of n members and waits until it has a
// leader. Without an etcd binary, or on a host that cannot bind 127.0.0.100
// and up, a test skips (fails under CI) saying what it needs.
func StartEtcd(tb TB, n int) *EtcdCluster {
	tb.Helper()
	need(tb, multiLoopback(), "one loopback address per etcd member (127.0.0.100 and up, as Linux has)")
	return startEtcd(tb, n, func(i int) string { return fmt.Sprintf("127.0.0.%d", 100+i) })
}

// startEtcd starts n etcd members, member i listening on ip(i).
func startEtcd(tb TB, n int, ip func(i int) string) *EtcdCluster {
	tb.Helper()
	needCommand(tb, "etcd", "Debian's etcd-server package")
	bin, err := exec.LookPath("etcd")
	if err != nil {
		tb.Fatalf("testcluster: %v", err)
		return nil
	}
	e := &EtcdCluster{tb: tb, dir: tb.TempDir(), timeout: 60 * time.Second}
	var initial []string
	taken := map[string]bool{}
	for i := range n {
		var client, peer string
		for client == "" || peer == "" || client == peer || taken[client] || taken[peer] {
			if client, err = freeTCP(ip(i)); err != nil {
				tb.Fatalf("%v", err)
			}
			if peer, err = freeTCP(ip(i)); err != nil {
				tb.Fatalf("%v", err)
			}
		}
		taken[client], taken[peer] = true, true
		m := &etcdMember{name: fmt.Sprintf("etcd-%d", i), client: client, peer: peer}
		e.members = append(e.members, m)
		initial = append(initial, m.name+"=http://"+peer)
	}
	tb.Cleanup(e.close)
	for _, m := range e.members {
		m.args = []string{
			"--name", m.name,
			"--data-dir", filepath.Join(e.dir, m.name),
			"--listen-client-urls", "http://" + m.client,
			"--advertise-client-urls", "http://" + m.client,
			"--listen-peer-urls", "http://" + m.peer,
			"--initial-advertise-peer-urls", "http://" + m.peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(e.dir),
			"--logger", "zap", "--log-outputs", "stderr",
		}
		m.bin = bin
		if err := e.start(m); err != nil {
			tb.Fatalf("testcluster: start %s: %v", m.name, err)
		}
	}
	e.Leader()
	return e
}

// start starts member m's process (again: its data directory makes a
// restarted member rejoin as itself).
func (e *EtcdCluster) start(m *etcdMember) error {
	logf, err := os.OpenFile(filepath.Join(e.dir, m.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(m.bin, m.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	return nil
}

// Restart starts member i again after Kill, with its data, and waits until
// the running members agree on a leader.
func (e *EtcdCluster) Restart(i int) {
	e.tb.Helper()
	m := e.members[i]
	if e.running(i) {
		e.tb.Fatalf("testcluster: restart %s: it is running", m.name)
		return
	}
	if err := e.start(m); err != nil {
		e.tb.Fatalf("testcluster: restart %s: %v", m.name, err)
		return
	}
	e.Leader()
	e.tb.Logf("testcluster: restarted etcd member %s (pid %d)", m.name, m.cmd.Process.Pid)
}

// Len returns the number of members.
func (e *EtcdCluster) Len() int { return len(e.members) }

// Endpoints returns the members' client URLs.
func (e *EtcdCluster) Endpoints() []string {
	var out []string
	for _, m := range e.members {
		out = append(out, "http://"+m.client)
	}
	return out
}

func (e *EtcdCluster) close() {
	for _, m := range e.members {
		m.mu.Lock()
		if m.cmd.Process != nil {
			_ = m.cmd.Process.Signal(syscall.SIGCONT)
			_ = m.cmd.Process.Signal(syscall.SIGKILL)
		}
		done := m.done
		m.mu.Unlock()
		if done != nil {
			<-done
		}
	}
}

// Leader waits until the running members agree on a leader, and returns
// its index.
func (e *EtcdCluster) Leader() int {
	e.tb.Helper()
	ctx, cancel := context.WithTimeout(e.tb.Context(), e.timeout)
	defer cancel()
	leader := -1
	err := poll(ctx, func(ctx context.Context) (bool, string) {
		ids := map[uint64]int{}
		var leaders []uint64
		for i, m := range e.members {
			if !e.running(i) {
				continue
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + m.client}, DialTimeout: time.Second, Logger: zap.NewNop()})
			if err != nil {
				return false, err.Error()
			}
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, "http://"+m.client)
			scancel()
			cli.Close()
			if err != nil {
				return false, fmt.Sprintf("%s: %v", m.name, err)
			}
			ids[st.Header.MemberId] = i
			leaders = append(leaders, st.Leader)
		}
		if len(leaders) == 0 {
			return false, "no member runs"
		}
		for _, l := range leaders {
			if l == 0 || l != leaders[0] {
				return false, fmt.Sprintf("leaders reported: %x", leaders)
			}
		}
		i, ok := ids[leaders[0]]
		leader = i
		return ok, fmt.Sprintf("leader %x is not a running member", leaders[0])
	})
	if err != nil {
		e.tb.Fatalf("testcluster: waiting for an etcd leader: %v", err)
	}
	return leader
}

func (e *EtcdCluster) running(i int) bool {
	select {
	case <-e.members[i].done:
		return false
	default:
		return true
	}
}

// Kill kills member i with SIGKILL and waits for it to end.
func (e *EtcdCluster) Kill(i int) {
	e.tb.Helper()
	m := e.members[i]
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		e.tb.Fatalf("testcluster: kill %s: %v", m.name, err)
	}
	<-m.done
	e.tb.Logf("testcluster: killed etcd member %s (pid %d)", m.name, m.cmd.Process.Pid)
}

// Freeze stops every member with SIGSTOP (freeze) or resumes them with
// SIGCONT: while frozen, etcd is unreachable as behind a network that drops
// its packets (connections hang; nothing is refused).
func (e *EtcdCluster) Freeze(freeze bool) {
	e.tb.Helper()
	sig := syscall.SIGCONT
	if freeze {
		sig = syscall.SIGSTOP
	}
	for i, m := range e.members {
		if !e.running(i) {
			continue
		}
		if err := m.cmd.Process.Signal(sig); err != nil {
			e.tb.Fatalf("testcluster: %v to %s: %v", sig, m.name, err)
		}
		if freeze {
			ctx, cancel := context.WithTimeout(e.tb.Context(), e.timeout)
			err := waitStopped(ctx, m.cmd.Process.Pid)
			cancel()
			if err != nil {
				e.tb.Fatalf("testcluster: waiting for %s to stop: %v", m.name, err)
			}
		}
	}
	e.tb.Logf("testcluster: etcd frozen: %t", freeze)
}
