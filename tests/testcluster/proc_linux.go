package testcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// setParentDeathSignal has the kernel kill the silo if the test process
// dies first, so that no silo outlives a crashed test.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until every thread of pid is stopped (state T in
// /proc/<pid>/task/*/stat): kill(2) returns before a SIGSTOP has stopped
// all of a process's threads.
func waitStopped(ctx context.Context, pid int) error {
	return poll(ctx, func(context.Context) (bool, string) {
		stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(stats) == 0 {
			return false, fmt.Sprintf("no threads of pid %d: %v", pid, err)
		}
		for _, st := range stats {
			b, err := os.ReadFile(st)
			if err != nil {
				return false, err.Error()
			}
			// The state follows the command name, which is in parentheses.
			i := strings.LastIndexByte(string(b), ')')
			if i < 0 || i+2 >= len(b) || b[i+2] != 'T' && b[i+2] != 't' {
				return false, fmt.Sprintf("%s: %.60s", st, b[i+1:])
			}
		}
		return true, ""
	})
}
