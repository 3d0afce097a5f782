package tests

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// TestMain checks that no test leaves goroutines behind, and removes the
// binaries testcluster built.
func TestMain(m *testing.M) { goleak.VerifyTestMain(testcluster.Main(m)) }
