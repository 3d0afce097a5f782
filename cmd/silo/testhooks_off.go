//go:build !agentsilo_testhooks

package main

import "github.com/agentsilo/agentsilo/grain"

// testAgents, in the production build, leaves args alone and registers no
// test agents (see testhooks.go).
func testAgents(args []string) ([]string, func(reg *grain.Registry) error, error) {
	return args, nil, nil
}
