package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuProc is a process whose CPU time a window accounts: this one (pid 0,
// read with getrusage) or a child (read from /proc/PID/stat, in clock ticks
// of 10 ms).
type cpuProc struct {
	name string
	pid  int
}

// cpuProcs are the processes each measured window accounts, in order. By
// default only this one; the remote suite adds node-b.
var cpuProcs = []cpuProc{{name: "self"}}

// cpuTime returns the CPU time (user and system) p has used so far, and
// false if it cannot be read.
func (p cpuProc) cpuTime() (time.Duration, bool) {
	if p.pid == 0 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0, false
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(utime+stime) * tick, true
}

// cpuSample reads every cpuProcs entry; nil if any cannot be read.
func cpuSample() []time.Duration {
	out := make([]time.Duration, len(cpuProcs))
	for i, p := range cpuProcs {
		d, ok := p.cpuTime()
		if !ok {
			return nil
		}
		out[i] = d
	}
	return out
}
