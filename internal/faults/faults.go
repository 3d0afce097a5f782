// Package faults injects a network partition between a silo and its peers,
// for the cluster tests (`silo --fault-injection`, a flag only a build with
// the agentsilo_testhooks tag has: see cluster/testhooks.go): while
// isolated, the silo-to-silo transport refuses and breaks its connections
// in both directions and gossip drops every packet and stream. etcd and the
// client gateway are not affected. It cuts connections from inside the
// process; tests of real partitions use network namespaces.
package faults

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Faults is one silo's partition switch. Its methods are safe for
// concurrent use.
type Faults struct {
	isolated atomic.Bool
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

var errIsolated = errors.New("fault injection: isolated from peers")

// New returns a switch that is not isolated.
func New() *Faults { return &Faults{conns: make(map[net.Conn]struct{})} }

// SetIsolated cuts the silo off from its peers, or heals the cut.
func (f *Faults) SetIsolated(on bool) {
	f.isolated.Store(on)
	if !on {
		return
	}
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
		delete(f.conns, c)
	}
	f.mu.Unlock()
}

func (f *Faults) track(c net.Conn) net.Conn {
	f.mu.Lock()
	f.conns[c] = struct{}{}
	f.mu.Unlock()
	return &faultConn{Conn: c, f: f}
}

// Dial is the transport's dialer (grpc.WithContextDialer).
func (f *Faults) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if f.isolated.Load() {
		return nil, errIsolated
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return f.track(c), nil
}

// Listener wraps the peer listener: while isolated, new connections are
// closed at once.
func (f *Faults) Listener(l net.Listener) net.Listener { return &faultListener{Listener: l, f: f} }

type faultListener struct {
	net.Listener
	f *Faults
}

func (l *faultListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.f.isolated.Load() {
			c.Close()
			continue
		}
		return l.f.track(c), nil
	}
}

type faultConn struct {
	net.Conn
	f *Faults
}

func (c *faultConn) Close() error {
	c.f.mu.Lock()
	delete(c.f.conns, c.Conn)
	c.f.mu.Unlock()
	return c.Conn.Close()
}

// GossipTransport wraps memberlist's network transport with the partition.
type GossipTransport struct {
	inner   memberlist.NodeAwareTransport
	f       *Faults
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	wg      sync.WaitGroup
}

// NewGossipTransport returns memberlist's transport for c, bound to
// host:port, behind f.
func NewGossipTransport(f *Faults, host string, port int, c *memberlist.Config) (*GossipTransport, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{host},
		BindPort:  port,
		Logger:    c.Logger,
	})
	if err != nil {
		return nil, err
	}
	t := &GossipTransport{
		inner:   nt,
		f:       f,
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		done:    make(chan struct{}),
	}
	t.wg.Add(2)
	go func() {
		defer t.wg.Done()
		for {
			select {
			case <-t.done:
				return
			case p := <-nt.PacketCh():
				if f.isolated.Load() {
					continue
				}
				select {
				case t.packets <- p:
				case <-t.done:
					return
				}
			}
		}
	}()
	go func() {
		defer t.wg.Done()
		for {
			select {
			case <-t.done:
				return
			case c := <-nt.StreamCh():
				if f.isolated.Load() {
					c.Close()
					continue
				}
				select {
				case t.streams <- c:
				case <-t.done:
					c.Close()
					return
				}
			}
		}
	}()
	return t, nil
}

func (t *GossipTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

func (t *GossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.f.isolated.Load() {
		return time.Now(), nil
	}
	return t.inner.WriteTo(b, addr)
}

func (t *GossipTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	if t.f.isolated.Load() {
		return time.Now(), nil
	}
	return t.inner.WriteToAddress(b, addr)
}

func (t *GossipTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *GossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.f.isolated.Load() {
		return nil, errIsolated
	}
	return t.inner.DialTimeout(addr, timeout)
}

func (t *GossipTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.f.isolated.Load() {
		return nil, errIsolated
	}
	return t.inner.DialAddressTimeout(addr, timeout)
}

func (t *GossipTransport) StreamCh() <-chan net.Conn { return t.streams }

func (t *GossipTransport) Shutdown() error {
	err := t.inner.Shutdown()
	close(t.done)
	t.wg.Wait()
	return err
}
