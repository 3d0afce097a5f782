package k8s_test

// Network namespaces for the tests on a real control plane: one stands for
// the node (a bridge, the control plane, the cluster's DNS), one for each
// pod (its own IP on a veth pair into the node's bridge). Nothing in them
// reaches the machine's own network: the node has no interface but its
// loopback, its bridge and the pods' veths.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// netns is a named network namespace (ip netns add).
type netns struct{ name string }

// ipCmd runs ip with args, returning its output in the error.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func addNetns(name string) (*netns, error) {
	if err := ipCmd("netns", "add", name); err != nil {
		return nil, err
	}
	n := &netns{name: name}
	if err := n.ip("link", "set", "lo", "up"); err != nil {
		n.remove()
		return nil, err
	}
	return n, nil
}

// ip runs ip -n name args.
func (n *netns) ip(args ...string) error { return ipCmd(append([]string{"-n", n.name}, args...)...) }

func (n *netns) remove() error { return ipCmd("netns", "delete", n.name) }

// command is a command run inside the namespace (ip netns exec, which
// execs the program: the process is the program itself).
func (n *netns) command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

// do runs fn on a thread of its own inside the namespace: sockets fn
// opens belong to the namespace. The thread goes back to the test's
// namespace after, or, if it cannot, ends with the goroutine.
func (n *netns) do(fn func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + n.name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", n.name, err)
			return
		}
		fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and ends with this goroutine.
			errc <- fmt.Errorf("setns back from %s: %w", n.name, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	return <-errc
}

// dial connects from inside the namespace.
func (n *netns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	if nsErr := n.do(func() { c, err = (&net.Dialer{}).DialContext(ctx, network, addr) }); nsErr != nil {
		return nil, nsErr
	}
	return c, err
}

// listen listens inside the namespace.
func (n *netns) listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	var err error
	if nsErr := n.do(func() { l, err = net.Listen(network, addr) }); nsErr != nil {
		return nil, nsErr
	}
	return l, err
}
