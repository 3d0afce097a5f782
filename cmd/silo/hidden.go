//go:build agentsilo_testhooks

package main

import (
	"fmt"
	"os"
	"strings"
)

// cutHiddenFlag removes the hidden flag name (given as --name VALUE,
// --name=VALUE or with one dash) from args and returns the remaining args and
// its value; without the flag the value comes from SILO_<NAME>, as for every
// flag. Hidden flags are for tests (such as --journal) and stay out of
// --help, which the standard flag package cannot do for a defined flag.
func cutHiddenFlag(args []string, name string) ([]string, string, error) {
	env := "SILO_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	value := os.Getenv(env)
	rest := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		flagName, v, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if !strings.HasPrefix(a, "-") || flagName != name {
			rest = append(rest, a)
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, "", fmt.Errorf("flag needs an argument: --%s", name)
			}
			i++
			v = args[i]
		}
		value = v
	}
	return rest, value, nil
}
