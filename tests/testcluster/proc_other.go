//go:build !linux

package testcluster

import "os/exec"

// setParentDeathSignal does nothing here: only Linux has a parent-death
// signal. The harness kills its silos at the end of each test.
func setParentDeathSignal(*exec.Cmd) {}
