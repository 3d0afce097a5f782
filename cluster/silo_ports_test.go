package cluster

import (
	"errors"
	"io"
	"net"
	"testing"

	"go.uber.org/goleak"
)

// A kept listener hands each connection to the listener that took it
// last; closing that one leaves the port open (a connection then finds no
// taker and is closed), until the kept listener closes.
func TestKeptListenerHandsOver(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := keepListener(lis)
	addr := lis.Addr().String()
	// reaches dials addr, writes a byte, and reports whether h accepts
	// the connection with that byte.
	reaches := func(h *handedListener) bool {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte{7}); err != nil {
			t.Fatal(err)
		}
		s, err := h.Accept()
		if err != nil {
			t.Fatalf("Accept: %v", err)
		}
		defer s.Close()
		b := make([]byte, 1)
		_, err = io.ReadFull(s, b)
		return err == nil && b[0] == 7
	}

	a := k.handOut()
	if a.Addr().String() != addr {
		t.Errorf("handed-out Addr %s, want %s", a.Addr(), addr)
	}
	a.take()
	if !reaches(a) {
		t.Fatal("a connection did not reach the listener that took the port")
	}
	b := k.handOut()
	b.take()
	if !reaches(b) {
		t.Fatal("a connection did not reach the listener that took the port from another")
	}
	a.Close()
	if _, err := a.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	if !reaches(b) {
		t.Fatal("closing a listener that no longer held the port took it from the one that does")
	}

	// No taker: the port accepts, and the connection is closed at once.
	b.Close()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the port closed with its last taker: %v", err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a connection without a taker was not closed")
	}
	c.Close()

	k.close()
	if _, err := k.handOut().Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept of a closed kept listener: %v, want net.ErrClosed", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the port still listens once the kept listener closed")
	}
}
