package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

// TestRun runs the program briefly, every part in one short round: each
// series answered loops and no call failed; the parts' lines carry their
// ratios; the memory part found the conversations it made active, none
// left in memory once deactivated, and a record stored for each.
func TestRun(t *testing.T) {
	var out, stderr bytes.Buffer
	args := []string{"-rounds", "1", "-warmup", "0", "-window", "200ms", "-n", "1,2", "-conversations", "20", "-conv-latency", "5ms"}
	if err := run(t.Context(), args, &out, &stderr); err != nil {
		t.Fatalf("llmbench %v: %v\n%s", args, err, stderr.String())
	}
	t.Logf("output:\n%s%s", out.String(), stderr.String())
	rows := make(map[string][]map[string]any)
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("a line that is not JSON: %q: %v", sc.Text(), err)
		}
		name, _ := row["bench"].(string)
		rows[name] = append(rows[name], row)
	}
	for name, want := range map[string]int{"direct-loop": 3, "silo-loop": 3, "loop-cost": 2, "conversations": 1, "memory": 1} {
		if len(rows[name]) != want {
			t.Errorf("%d lines of %s, want %d", len(rows[name]), name, want)
		}
	}
	for _, name := range []string{"direct-loop", "silo-loop"} {
		for _, r := range rows[name] {
			if r["calls"].(float64) < 1 || r["errors"].(float64) != 0 {
				t.Errorf("%s, n=%v: %v loops, %v errors (%v); want some and none", name, r["n"], r["calls"], r["errors"], r["first_error"])
			}
		}
	}
	for _, r := range rows["loop-cost"] {
		if r["wall_ratio"].(float64) <= 0 || r["etcd_txns_per_loop"].(float64) <= 0 {
			t.Errorf("loop-cost: %v", r)
		}
	}
	for _, r := range rows["conversations"] {
		if r["share"].(float64) <= 0 {
			t.Errorf("conversations: %v", r)
		}
	}
	for _, r := range rows["memory"] {
		if r["active"].(float64) != 20 || r["idle_in_memory"].(float64) != 0 || r["record_bytes_mean"].(float64) <= 0 {
			t.Errorf("memory: %v; want 20 active, none in memory once idle, records stored", r)
		}
	}
}

// TestProfiles: -cpuprofile-series profiles each measured window of one
// series in a numbered file, -memprofile writes the heap once the memory
// part's conversations are deactivated, and a series that is not one is
// refused.
func TestProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	var out, stderr bytes.Buffer
	args := []string{"-rounds", "2", "-warmup", "0", "-window", "100ms", "-parts", "loop,memory", "-conversations", "5",
		"-cpuprofile", cpu, "-cpuprofile-series", "silo-loop", "-memprofile", mem}
	if err := run(t.Context(), args, &out, &stderr); err != nil {
		t.Fatalf("llmbench %v: %v\n%s", args, err, stderr.String())
	}
	for _, f := range []string{cpu + ".1", cpu + ".2", mem} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v, want a profile", f, err)
		}
	}
	if _, err := os.Stat(cpu); err == nil {
		t.Errorf("%s written: with -cpuprofile-series only the numbered files are", cpu)
	}
	if err := run(t.Context(), []string{"-cpuprofile", cpu, "-cpuprofile-series", "loop"}, &out, &stderr); err == nil {
		t.Error("-cpuprofile-series loop: no error, want one (direct-loop or silo-loop)")
	}
}

// TestApprovalsPart: turns parked for approval on a cluster of two silos
// hold no activation once ended, and approving them all runs each call
// once and ends every turn.
func TestApprovalsPart(t *testing.T) {
	var out, stderr bytes.Buffer
	args := []string{"-parts", "approvals", "-approvals", "40", "-silos", "2"}
	if err := run(t.Context(), args, &out, &stderr); err != nil {
		t.Fatalf("llmbench %v: %v\n%s", args, err, stderr.String())
	}
	var r map[string]any
	for line := range strings.Lines(out.String()) {
		if strings.Contains(line, `"bench":"approvals"`) {
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r == nil || r["active_while_waiting"].(float64) != 0 || r["calls_run"].(float64) != 40 || r["lost"].(float64) != 0 || r["twice"].(float64) != 0 || r["unfinished_after"].(float64) != 0 || r["record_bytes_mean"].(float64) <= 0 {
		t.Fatalf("approvals: %v; want none active, 40 calls run, none lost or twice, every turn ended\n%s", r, out.String())
	}
}

// TestHistoryPart: the history part continues a conversation whose record
// holds its turns, and reports both medians.
func TestHistoryPart(t *testing.T) {
	var out, stderr bytes.Buffer
	args := []string{"-parts", "history", "-history", "20", "-rounds", "1"}
	if err := run(t.Context(), args, &out, &stderr); err != nil {
		t.Fatalf("llmbench %v: %v\n%s", args, err, stderr.String())
	}
	var r map[string]any
	for line := range strings.Lines(out.String()) {
		if strings.Contains(line, `"bench":"history"`) {
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Twenty turns of 300 bytes and more: a record of several KiB.
	if r == nil || r["turns_before"].(float64) != 20 || r["samples"].(float64) != 5 || r["record_kib"].(float64) < 6 || r["new_ms_median"].(float64) <= 0 || r["continued_ms_median"].(float64) <= 0 {
		t.Fatalf("history: %v\n%s", r, out.String())
	}
}

// TestModelClientAndLease: the model agents on the llm package's own HTTP
// client, with a longer lease, still loop without errors; a client that
// is not one is refused.
func TestModelClientAndLease(t *testing.T) {
	var out, stderr bytes.Buffer
	args := []string{"-rounds", "1", "-warmup", "0", "-window", "200ms", "-parts", "conversations", "-conversations", "20", "-conv-latency", "5ms", "-model-client", "default", "-lease", "5s"}
	if err := run(t.Context(), args, &out, &stderr); err != nil {
		t.Fatalf("llmbench %v: %v\n%s", args, err, stderr.String())
	}
	sc := bufio.NewScanner(&out)
	silo := 0
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("a line that is not JSON: %q: %v", sc.Text(), err)
		}
		if row["bench"] == "silo-loop" {
			silo++
			if row["calls"].(float64) < 1 || row["errors"].(float64) != 0 {
				t.Errorf("silo-loop on the llm package's client: %v loops, %v errors (%v)", row["calls"], row["errors"], row["first_error"])
			}
		}
	}
	if silo != 1 {
		t.Errorf("%d silo-loop lines, want 1:\n%s", silo, out.String())
	}
	if err := run(t.Context(), []string{"-model-client", "mine"}, &out, &stderr); err == nil {
		t.Error("-model-client mine: accepted")
	}
}
