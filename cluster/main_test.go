package cluster

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// JSON logs write durations as Go durations, not nanoseconds.
func TestNewLoggerDurations(t *testing.T) {
	var buf bytes.Buffer
	l, err := newLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("x", "timeout", 30*time.Second)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["timeout"] != "30s" {
		t.Fatalf("timeout logged as %v (%T), want \"30s\"", rec["timeout"], rec["timeout"])
	}
	for _, bad := range [][2]string{{"xml", "info"}, {"json", "loud"}} {
		if _, err := newLogger(&buf, bad[0], bad[1]); err == nil {
			t.Errorf("newLogger(%q, %q): no error", bad[0], bad[1])
		}
	}
}

// A program's --version prints the version and exits 0; a bad flag is a
// usage error, exit 2.
func TestProgramVersionAndUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	p := Program{Name: "mysilo", Registry: newTestRegistry(t)}
	if code := p.Run([]string{"--version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "mysilo "+Version()) {
		t.Fatalf("--version: exit %d, %q, %q", code, out.String(), errOut.String())
	}
	if code := p.Run([]string{"--no-such-flag"}, &out, &errOut); code != 2 {
		t.Fatalf("a bad flag: exit %d", code)
	}
	if code := p.Run([]string{"--log-format", "xml"}, &out, &errOut); code != 2 {
		t.Fatalf("a bad log format: exit %d", code)
	}
}
