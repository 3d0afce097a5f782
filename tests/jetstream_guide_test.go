package tests

import (
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agentsilo/agentsilo/internal/natstest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestJetStreamGuide runs the JetStream guide's silo command line
// (docs/jetstream.md) as written but for the NATS server's port and the
// silo's own addresses: a subscription and a publish through it reach the
// subscriber, and the subscription and the message are in JetStream; the
// silo stops cleanly on SIGTERM.
func TestJetStreamGuide(t *testing.T) {
	ns := natstest.Start(t)
	buildBinaries(t)
	line := strings.TrimSpace(testutil.DocBlock(t, "docs/jetstream.md", "jetstream:silo"))
	words := shellWords(t, line)
	if len(words) < 4 || strings.Join(words[:3], " ") != "go run ./cmd/silo" {
		t.Fatalf("docs/jetstream.md jetstream:silo: %q is not a silo command", line)
	}
	args := words[3:]
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "nats://127.0.0.1:4222", ns.URL())
	}
	p := startSilo(t, t.TempDir(), args...)
	if _, errOut, code := p.cli("subscribe", "Inbox:a", "orders", "orders.#"); code != 0 {
		t.Fatalf("subscribe: exit %d: %s", code, errOut)
	}
	out, errOut, code := p.cli("publish", "orders.created", "order 1")
	if code != 0 || !strings.Contains(out, "(queued for 1 subscriptions)") {
		t.Fatalf("publish: exit %d: %q %s", code, out, errOut)
	}
	testutil.WaitFor(t, "Inbox:a to count the order", func() bool { return p.mustAsk("Inbox:a", "count") == "1" })

	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	// The subscription in the registry bucket, the message in the log
	// stream (gone once acknowledged: its sequence stays).
	for _, stream := range []string{"KV_agentsilo_topics_reg", "agentsilo_topics_log"} {
		si, err := js.StreamInfo(stream)
		if err != nil || si.State.LastSeq == 0 {
			t.Fatalf("the stream %s in JetStream: %v %v", stream, si, err)
		}
	}
	if code := p.stop(os.Interrupt); code != 0 {
		t.Fatalf("silo exit %d:\n%s", code, p.stderr.String())
	}
}
