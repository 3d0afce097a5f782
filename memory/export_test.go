package memory

import "github.com/agentsilo/agentsilo/internal/clock"

// SetClock sets the clock of cfg's expiries, which only tests replace.
func SetClock(cfg *Config, clk clock.Clock) { cfg.clk = clk }
