package a2a

import (
	"strconv"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// An A2A agent's follow and loop settings, whatever its configuration
// says: valid settings, or FailedPrecondition naming the key.
func FuzzFollowConfig(f *testing.F) {
	f.Add("20", "3", "2s", "30s")
	f.Add("0", "1", "-1s", "1h")
	f.Add("x", "", "5ms", "1ms")
	f.Add("99999999999999999999", "2", "1ns", "")
	base := (&RemoteOptions{}).settings()
	addr := grain.Address{Type: RemoteType, Owner: "o", Alias: "a"}
	f.Fuzz(func(t *testing.T, rounds, repeats, pollMin, pollMax string) {
		cfg := map[string]string{ConfigMaxRounds: rounds, ConfigMaxRepeats: repeats, ConfigPollMin: pollMin, ConfigPollMax: pollMax}
		s, err := base.withConfig(addr, cfg)
		if err != nil {
			if errs.Code(err) != codes.FailedPrecondition {
				t.Fatalf("%v: %v", cfg, err)
			}
			return
		}
		if s.maxRounds < 1 || s.maxRepeats < 2 || s.pollMin < minConfigPoll || s.pollMax < s.pollMin {
			t.Fatalf("%v: settings %+v", cfg, s)
		}
	})
}

// The loop guard cuts at the limits and keeps at most maxGuards tasks.
func TestGuards(t *testing.T) {
	var g guards
	for i := range 3 {
		if _, err := g.question("t", "q", []byte("same?"), 20); err != nil {
			t.Fatal(err)
		}
		_, err := g.answer("t", []byte("same"), 3)
		if (err != nil) != (i == 2) {
			t.Fatalf("exchange %d: %v", i+1, err)
		}
	}
	g.done("t")
	for i := range 5 {
		_, err := g.question("u", "q", []byte{byte(i)}, 4)
		if (err != nil) != (i == 4) {
			t.Fatalf("question %d: %v", i+1, err)
		}
		g.answer("u", []byte{byte(i)}, 3)
	}
	for i := range maxGuards + 10 {
		g.question(spec.TaskID(strconv.Itoa(i)), "", nil, 20)
	}
	if len(g.m) > maxGuards {
		t.Fatalf("%d guards kept", len(g.m))
	}
}
