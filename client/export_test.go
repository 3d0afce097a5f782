package client

import "time"

// SetAfter replaces c's time.After, through which it pauses before
// re-attaching its session.
func SetAfter(c *Client, after func(time.Duration) <-chan time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.after = after
}
