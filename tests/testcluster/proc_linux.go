package testcluster

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the silo if the test process
// dies first, so that no silo outlives a crashed test.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
