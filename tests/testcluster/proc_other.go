//go:build !linux

package testcluster

import (
	"context"
	"os/exec"
)

// setParentDeathSignal does nothing here: only Linux has a parent-death
// signal. The harness kills its silos at the end of each test.
func setParentDeathSignal(*exec.Cmd) {}

// waitStopped cannot look at threads here; it returns at once.
func waitStopped(context.Context, int) error { return nil }
