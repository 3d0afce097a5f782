package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// TestHooksTag is the build tag that puts the test hooks into `silo`: the
// --fault-injection flag (Partition), the hidden --journal flag and the test
// agents that write the journal. Build says it; a program that builds
// `silo` for the harness itself must too.
const TestHooksTag = "agentsilo_testhooks"

// Binaries are the programs the harness runs.
type Binaries struct {
	Silo, Client string
}

var build struct {
	mu   sync.Mutex
	dir  string
	bins Binaries
	err  error
}

// Build builds the silo and client programs of this module, once per
// process; later calls return the same binaries (or the same error). Main
// removes them when the tests end; a program calls Cleanup.
func Build() (Binaries, error) {
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.bins.Silo != "" || build.err != nil {
		return build.bins, build.err
	}
	build.bins, build.err = buildBinaries()
	return build.bins, build.err
}

func buildBinaries() (Binaries, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("testcluster: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return Binaries{}, fmt.Errorf("testcluster: not inside the agentsilo module")
	}
	root := filepath.Dir(gomod)
	dir, err := os.MkdirTemp("", "testcluster-bin-")
	if err != nil {
		return Binaries{}, fmt.Errorf("testcluster: %w", err)
	}
	build.dir = dir
	bins := Binaries{Silo: filepath.Join(dir, "silo"), Client: filepath.Join(dir, "client")}
	// The test hooks (--fault-injection, --journal and the test agents)
	// are built only with this tag; the production binary has none.
	cmd := exec.Command("go", "build", "-tags", TestHooksTag, "-o", dir+string(filepath.Separator), "./cmd/silo", "./cmd/client")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("testcluster: go build -tags %s ./cmd/silo ./cmd/client: %w\n%s", TestHooksTag, err, msg)
	}
	return bins, nil
}

// Cleanup removes the binaries Build made. Main calls it for tests.
func Cleanup() {
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	build.dir, build.bins, build.err = "", Binaries{}, nil
}

// TestingM is what Main wraps: *testing.M.
type TestingM interface{ Run() int }

// Main wraps m so that the binaries Build made are removed after the tests
// ran. Use it in TestMain, inside the goroutine-leak check:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testcluster.Main(m)) }
func Main(m TestingM) TestingM { return mainM{m} }

type mainM struct{ m TestingM }

func (m mainM) Run() int {
	defer Cleanup()
	return m.m.Run()
}
