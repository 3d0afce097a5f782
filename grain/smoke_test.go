package grain

import (
	"context"
	"testing"
	"time"
)

type echoAgent struct{}

func (echoAgent) OnMessage(ctx context.Context, m *Message) (*Message, error) {
	r := m.Response()
	r.Message = m.Message
	return r, nil
}

func TestSmoke(t *testing.T) {
	reg := NewRegistry()
	reg.Register("Echo", func(Host) (Agent, error) { return echoAgent{}, nil })
	rt, err := New(DefaultConfig(), reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		r, err := rt.Ask(t.Context(), &Message{To: "Echo:a:b", Message: "hi"})
		if err != nil || r.Message != "hi" {
			t.Fatal(r, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
