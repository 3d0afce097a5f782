package cluster

import (
	"testing"

	"github.com/agentsilo/agentsilo/grain"
)

// The declared types' model calls keep an idle connection per
// conversation calling a model at once, past Go's default of 2 a host
// (every call past them would open a connection and close it).
func TestDeclaredModelKeepsConnections(t *testing.T) {
	cfg := DefaultSiloConfig()
	d := newDeclaredTypes(nil, "/p/", grain.NewRegistry(), &cfg)
	defer d.model.CloseIdleConnections()
	if d.model.MaxIdleConnsPerHost < declaredModelIdleConns || d.model.MaxIdleConns < declaredModelIdleConns {
		t.Errorf("idle connections kept: %d a host, %d in all; want %d", d.model.MaxIdleConnsPerHost, d.model.MaxIdleConns, declaredModelIdleConns)
	}
	if d.model.DialContext == nil {
		t.Error("the transport lost its guarded dialer")
	}
}
