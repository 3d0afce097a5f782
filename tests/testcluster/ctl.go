package testcluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agentsilo/agentsilo/client"
)

// ctlClient is the harness's own SDK client to one silo process, for Ask,
// Members and the waits. It is dialled on first use and closed when the
// process ends, so that it never fails over to another gateway.
type ctlClient struct {
	pid  int
	once sync.Once
	cl   *client.Client
	err  error
}

func (cc *ctlClient) close() {
	// Waits for a dial in progress; a later use gets errCtlClosed.
	cc.once.Do(func() { cc.err = errCtlClosed })
	if cc.cl != nil {
		cc.cl.Close()
	}
}

var errCtlClosed = errors.New("testcluster: the silo's process ended")

// ctlClient returns the harness's client to silo i's current process.
func (c *Cluster) ctlClient(ctx context.Context, i int) (*client.Client, error) {
	s := c.Silo(i)
	p := s.current()
	if p == nil || !p.running() {
		return nil, fmt.Errorf("testcluster: %s is not running", s.Name)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("testcluster: cluster closed")
	}
	cc := c.ctl[i]
	if cc != nil && cc.pid != p.pid {
		defer cc.close()
		cc = nil
	}
	if cc == nil {
		cc = &ctlClient{pid: p.pid}
		c.ctl[i] = cc
	}
	c.mu.Unlock()
	cc.once.Do(func() {
		cc.cl, cc.err = client.Dial(ctx, []string{s.GatewayAddr}, client.WithPrincipal(Principal))
	})
	if cc.err != nil {
		// Dial again next time.
		c.mu.Lock()
		if c.ctl[i] == cc {
			delete(c.ctl, i)
		}
		c.mu.Unlock()
		return nil, cc.err
	}
	return cc.cl, nil
}

// dropCtl closes the harness's client to silo i.
func (c *Cluster) dropCtl(i int) {
	c.mu.Lock()
	cc := c.ctl[i]
	delete(c.ctl, i)
	c.mu.Unlock()
	if cc != nil {
		cc.close()
	}
}
