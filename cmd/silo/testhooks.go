//go:build agentsilo_testhooks

package main

import (
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
)

// This file, and the test agents it registers, are built only with the
// agentsilo_testhooks tag, for the cluster tests (tests/testcluster builds
// `silo` with it). The production binary has neither the hidden --journal
// flag nor these agents (see testhooks_off.go).

// testAgents cuts the hidden test flag --journal FILE from args (it stays
// out of --help) and returns the remaining args and a function that
// registers the test agent types with it: Journal, StateProbe, TopicSink,
// Waiter, SessionPusher, Tally and LabelProbe; most append what they see to FILE and files
// beside it for the tests to read.
func testAgents(args []string) ([]string, func(reg *grain.Registry) error, error) {
	args, journal, err := cutHiddenFlag(args, "journal")
	if err != nil || journal == "" {
		return args, nil, err
	}
	return args, func(reg *grain.Registry) error {
		if err := demoagents.RegisterTopicSink(reg, journal+".topics"); err != nil {
			return err
		}
		if err := registerWaiter(reg, journal+".waiter"); err != nil {
			return err
		}
		if err := registerSessionPusher(reg); err != nil {
			return err
		}
		if err := registerTally(reg, journal+".tally"); err != nil {
			return err
		}
		if err := registerLabelProbe(reg); err != nil {
			return err
		}
		return demoagents.RegisterJournal(reg, journal)
	}, nil
}
