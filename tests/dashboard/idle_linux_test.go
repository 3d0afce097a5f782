package dashboard

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// BenchmarkIdleLoad measures the dashboard's own load on an idle silo: a
// `silo --demo` process, its CPU time (from /proc) over a window with no
// page open (after a window of warming up), then over as long a window
// with the cluster page open in headless Chromium (polling its live part
// every 3 s, its charts every 5 s, which makes the silo mark the charts
// watched in etcd and publish its samples there). It reports both as a share of one core. Run it alone:
//
//	go test -run XXX -bench IdleLoad -benchtime 1x ./tests/dashboard/
//
// DASHBOARD_IDLE_WINDOW sets the window (default 30s).
func BenchmarkIdleLoad(b *testing.B) {
	chromium := testutil.NeedCommand(b, "chromium", "Debian's chromium")
	window := 30 * time.Second
	if w, err := time.ParseDuration(os.Getenv("DASHBOARD_IDLE_WINDOW")); err == nil {
		window = w
	}
	base, proc := startDemo(b)
	// A first window lets the silo finish starting (its first directory
	// refresh, the embedded etcd's first compaction, the garbage of
	// startup): measured first, "idle" was above "page open".
	warm := cpuOver(b, proc.Pid, window)
	idle := cpuOver(b, proc.Pid, window)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1200, 760))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("members"))); err != nil {
		b.Fatal(err)
	}
	open := cpuOver(b, proc.Pid, window)
	b.ReportMetric(100*warm.Seconds()/window.Seconds(), "starting-%core")
	b.ReportMetric(100*idle.Seconds()/window.Seconds(), "idle-%core")
	b.ReportMetric(100*open.Seconds()/window.Seconds(), "page-open-%core")
	b.ReportMetric(100*(open-idle).Seconds()/window.Seconds(), "dashboard-%core")
}

// cpuOver is the CPU time process pid spends over the next d.
func cpuOver(b *testing.B, pid int, d time.Duration) time.Duration {
	before := procCPU(b, pid)
	time.Sleep(d) // the measurement window
	return procCPU(b, pid) - before
}

// procCPU reads a process's user and system time from /proc/PID/stat.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command (in parentheses): utime and stime are
	// the 14th and 15th of the line, in clock ticks (100 a second).
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
