package reminders

import "github.com/agentsilo/agentsilo/internal/clock"

// Clock is the scheduler's time source (see package internal/clock); tests
// replace it with a fake. Its methods are called concurrently.
type Clock = clock.Clock

// Timer is the part of *time.Timer the scheduler uses.
type Timer = clock.Timer

// RealClock is the wall clock.
type RealClock = clock.Real
