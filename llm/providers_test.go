package llm

import (
	"net/http"
	"testing"
)

// A provider made without WithHTTPClient keeps an idle connection per
// conversation calling its model at once (Go's default transport keeps 2
// a host, and every call past them opens a connection and closes it);
// one made with a client uses that client.
func TestProviderKeepsConnections(t *testing.T) {
	o := newOptions(nil)
	c := o.modelHTTPClient()
	tr, ok := c.Transport.(*http.Transport)
	if !ok || c == http.DefaultClient || tr == http.DefaultTransport {
		t.Fatalf("the provider's own client %+v: want one of its own", c)
	}
	if tr.MaxIdleConnsPerHost < modelIdleConns || tr.MaxIdleConns < modelIdleConns {
		t.Errorf("idle connections kept: %d a host, %d in all; want %d", tr.MaxIdleConnsPerHost, tr.MaxIdleConns, modelIdleConns)
	}
	if tr.Proxy == nil || tr.DialContext == nil {
		t.Errorf("the transport lost the default's proxy or dialer: %+v", tr)
	}
	if newOptions(nil).modelHTTPClient() == c {
		t.Errorf("two providers share one client")
	}
	given := &http.Client{}
	if got := newOptions([]Option{WithHTTPClient(given)}).modelHTTPClient(); got != given {
		t.Errorf("the provider's client %p, want the one given %p", got, given)
	}
}
