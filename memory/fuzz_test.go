package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
)

// memHost is the part of a grain.Host a Memory agent uses, with its state
// in memory; its Ask reaches the owner's ledger, if it has one.
type memHost struct {
	grain.Host
	alias  string // "" is "f"
	data   []byte
	etag   int
	ledger *agent
}

func (h *memHost) Address() grain.Address {
	return grain.Address{Type: Type, Owner: "dev", Alias: cmp.Or(h.alias, "f")}
}
func (h *memHost) Owner() string        { return "dev" }
func (h *memHost) Logger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func (h *memHost) Ask(ctx context.Context, to string, m *grain.Message) (*grain.Message, error) {
	if h.ledger == nil || to != h.ledger.h.Address().String() {
		return nil, errs.New(codes.NotFound, "no agent %s here", to)
	}
	m.To, m.From, m.Kind = to, h.Address().String(), grain.KindRequest
	return h.ledger.OnMessage(ctx, m)
}

func (h *memHost) LoadState(context.Context) ([]byte, string, error) {
	if h.data == nil {
		return nil, "", nil
	}
	return h.data, string(rune('a' + h.etag)), nil
}

func (h *memHost) SaveState(_ context.Context, data []byte, etag string) (string, error) {
	cur := ""
	if h.data != nil {
		cur = string(rune('a' + h.etag))
	}
	if etag != cur {
		return "", errs.New(codes.Aborted, "stale")
	}
	h.data, h.etag = data, h.etag+1
	return string(rune('a' + h.etag)), nil
}

// Whatever a caller sends, the memory answers with a reply or an error
// with a code (never Unknown nor a crash), and stays within its bounds.
func FuzzMemoryRequest(f *testing.F) {
	for _, s := range []struct{ typ, data string }{
		{client.MemoryPut, `{"entry":{"key":"a","text":"x","category":"c","tags":["t"],"ttl":1000000000}}`},
		{client.MemoryPut, `{"entry":{"key":"b","value":{"n":[1,2]}}}`},
		{client.MemoryGet, `{"key":"a"}`},
		{client.MemoryDelete, `{"key":"a"}`},
		{client.MemoryList, `{"query":{"prefix":"a","tag":"t","limit":3}}`},
		{client.MemorySearch, `{"text":"x y"}`},
		{client.MemoryPut, `{"entry":{"key":"","ttl":-1}}`},
		{"memory.other", `{}`},
		{client.MemoryPut, `not json`},
		{msgReserve, `{"key":"k","rec":{"b":3,"x":1900000000000000000}}`},
		{msgSync, `{"recs":{"k":{"b":3,"x":1900000000000000000}}}`},
		{msgRelease, `{"key":"k"}`},
	} {
		f.Add(s.typ, []byte(s.data))
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	cfg := Config{clk: clk, MaxEntries: 5, MaxBytes: 400, MaxEntryBytes: 200}.fill()
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		lh := &memHost{alias: usageScope}
		h := &memHost{ledger: &agent{h: lh, cfg: cfg, st: grain.NewState[stored](lh)}}
		a := &agent{h: h, cfg: cfg, st: grain.NewState[stored](h)}
		ctx := context.Background()
		// Twice: the second runs on the state the first left. The
		// ledger takes the same, from the memory.
		for range 2 {
			if _, err := h.Ask(ctx, h.ledger.h.Address().String(), &grain.Message{MessageType: typ, Data: data}); err != nil {
				if c := errs.Code(err); c == codes.Unknown || c == codes.Internal {
					t.Fatalf("ledger %s %q: %v", typ, data, err)
				}
			}
			r, err := a.OnMessage(ctx, &grain.Message{Kind: grain.KindRequest, MessageType: typ, Data: data})
			switch {
			case err != nil:
				if c := errs.Code(err); c == codes.Unknown || c == codes.Internal {
					t.Fatalf("%s %q: %v", typ, data, err)
				}
			case r == nil || !json.Valid(r.Data):
				t.Fatalf("%s %q: reply %v", typ, data, r)
			}
			clk.Advance(time.Second)
		}
		if n := len(a.st.Value.Entries); n > cfg.MaxEntries || total(&a.st.Value) > cfg.MaxBytes {
			t.Fatalf("over the bounds: %d entries, %d bytes", n, total(&a.st.Value))
		}
	})
}
