package a2a

import "github.com/agentsilo/agentsilo/internal/clock"

// SetRemoteClock sets the clock of opts' polls, which only tests replace.
func SetRemoteClock(opts *RemoteOptions, clk clock.Clock) { opts.clk = clk }
