//go:build agentsilo_testhooks

package main

import (
	"slices"
	"testing"
)

func TestCutHiddenFlag(t *testing.T) {
	for _, tc := range []struct {
		args, rest []string
		env, value string
		err        bool
	}{
		{args: []string{"--name", "a"}, rest: []string{"--name", "a"}},
		{args: []string{"--journal", "j", "--name", "a"}, rest: []string{"--name", "a"}, value: "j"},
		{args: []string{"--name", "a", "-journal=j"}, rest: []string{"--name", "a"}, value: "j"},
		{args: []string{"--journalx", "j"}, rest: []string{"--journalx", "j"}},
		{args: []string{"--name", "a"}, rest: []string{"--name", "a"}, env: "e", value: "e"},
		{args: []string{"--journal=j"}, rest: []string{}, env: "e", value: "j"},
		{args: []string{"--", "--journal", "j"}, rest: []string{"--", "--journal", "j"}},
		{args: []string{"--journal"}, err: true},
	} {
		t.Setenv("SILO_JOURNAL", tc.env)
		rest, value, err := cutHiddenFlag(tc.args, "journal")
		if (err != nil) != tc.err || !tc.err && (!slices.Equal(rest, tc.rest) || value != tc.value) {
			t.Errorf("cutHiddenFlag(%q) = %q, %q, %v; want %q, %q, error %v", tc.args, rest, value, err, tc.rest, tc.value, tc.err)
		}
	}
}
