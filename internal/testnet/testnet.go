// Package testnet holds what tests need of the network: free loopback
// addresses to listen on.
package testnet

import (
	"net"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago. Another process may take the port before the test listens on it, so
// use port 0 where the code under test allows it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
