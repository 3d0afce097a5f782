// Package memory is the working memory: the built-in agent type Memory,
// an agent of which (Memory:owner:scope) keeps entries for a while, each
// with a key, text and/or a JSON value, a category and tags, in the silo's
// state store (so they outlive activations and silos). Entries expire
// after their TTL (60 minutes by default); a memory is bounded in entries
// and bytes, and so are all the memories of one owner together (over a
// bound, a put is ResourceExhausted; see owner.go for how the owner's
// account is kept).
//
// Agents reach a memory with Of, clients with client.NewMemory; both are
// the same typed handle (client.Memory) over the message types
// memory.put, memory.get, memory.delete, memory.list and memory.search:
//
//	mem := memory.Of(host, "notes") // Memory:<the agent's owner>:notes
//	_, err := mem.Put(ctx, client.MemoryEntry{Key: "plan", Text: "ship friday", Category: "decision"})
//	e, err := mem.Get(ctx, "plan")
//
// Every silo registers the type with DefaultConfig unless its registry
// has one already: register it first (Register) for other bounds.
package memory

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
)

// Type is the working memory's agent type.
const Type = client.MemoryType

// Config bounds a working memory. Start from DefaultConfig.
type Config struct {
	// DefaultTTL is how long an entry put without a TTL is kept.
	// Default: 60 min.
	DefaultTTL time.Duration
	// MaxTTL bounds the TTL a put may ask for. Default: 7 days.
	MaxTTL time.Duration
	// MaxEntries bounds the live entries of one memory. Default: 1000.
	MaxEntries int
	// MaxBytes bounds the size of one memory's entries (keys, texts,
	// values, categories and tags). Default: 1 MiB (the state store keeps
	// a memory as one value; etcd takes up to 1.5 MiB).
	MaxBytes int
	// MaxEntryBytes bounds one entry. Default: 64 KiB.
	MaxEntryBytes int
	// MaxOwnerEntries bounds the live entries of all the memories of one
	// owner together. Default: 10,000; at most 20,000 (the owner's
	// account is one stored value).
	MaxOwnerEntries int
	// MaxOwnerBytes bounds the size of all the memories of one owner
	// together. Default: 16 MiB.
	MaxOwnerBytes int

	// clk tells the time of expiries (nil: the real clock); only tests
	// replace it (export_test.go).
	clk clock.Clock
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{DefaultTTL: time.Hour, MaxTTL: 7 * 24 * time.Hour, MaxEntries: 1000, MaxBytes: 1 << 20, MaxEntryBytes: 64 << 10,
		MaxOwnerEntries: 10000, MaxOwnerBytes: 16 << 20}
}

// fill sets the zero fields of c to the defaults.
func (c Config) fill() Config {
	d := DefaultConfig()
	if c.DefaultTTL <= 0 {
		c.DefaultTTL = d.DefaultTTL
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = d.MaxTTL
	}
	c.MaxTTL = max(c.MaxTTL, c.DefaultTTL)
	if c.MaxEntries <= 0 {
		c.MaxEntries = d.MaxEntries
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = d.MaxBytes
	}
	if c.MaxEntryBytes <= 0 {
		c.MaxEntryBytes = d.MaxEntryBytes
	}
	if c.MaxOwnerEntries <= 0 {
		c.MaxOwnerEntries = d.MaxOwnerEntries
	}
	if c.MaxOwnerBytes <= 0 {
		c.MaxOwnerBytes = d.MaxOwnerBytes
	}
	if c.clk == nil {
		c.clk = clock.Real{}
	}
	return c
}

// Register registers Type in reg. Every silo of a cluster should register
// it with the same Config.
func Register(reg *grain.Registry, cfg Config) error {
	cfg = cfg.fill()
	if cfg.MaxOwnerEntries > maxOwnerEntriesLimit {
		return errs.New(codes.InvalidArgument, "memory: MaxOwnerEntries %d: at most %d", cfg.MaxOwnerEntries, maxOwnerEntriesLimit)
	}
	sk, err := skills()
	if err != nil {
		return errs.Wrap(codes.Internal, err, "memory: the skills' schemas")
	}
	return reg.Register(Type, func(h grain.Host) (grain.Agent, error) {
		return &agent{h: h, cfg: cfg, st: grain.NewState[stored](h)}, nil
	}, grain.TypeInfo{
		Description: "A working memory: entries (key, text, JSON value, category, tags) kept for a TTL (60 minutes by default) in the state store, bounded in count and bytes per memory and per owner.",
		Skills:      sk, // schema.go
	})
}

// Of returns a handle on the working memory Memory:<h's owner>:scope, for
// an agent.
func Of(h grain.Host, scope string) *client.Memory {
	return client.NewMemory(h, grain.Address{Type: Type, Owner: h.Owner(), Alias: scope}.String())
}

// stored is a memory's state.
type stored struct {
	Entries map[string]client.MemoryEntry `json:"entries,omitempty"`
}

// agent is a Memory agent. Its turns run one at a time.
type agent struct {
	h      grain.Host
	cfg    Config
	st     *grain.State[stored]
	loaded bool
	synced bool // the owner's ledger has this memory's entries (owner.go)

	usage *grain.State[usage] // the ledger's account, once loaded (the ledger only)
}

// The bounds of a request's parts.
const (
	maxKey    = 512
	maxTags   = 32
	maxTag    = 128
	maxLimit  = 1000
	defLimit  = 100
	maxSearch = 1024
)

// OnMessage implements grain.Agent.
func (a *agent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if a.isLedger() {
		return a.ledger(ctx, m)
	}
	var req client.MemoryRequest
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			return nil, errs.Wrap(codes.InvalidArgument, err, "%s: the data is not a memory request", a.h.Address())
		}
	}
	if !a.loaded {
		if err := a.st.Load(ctx); err != nil {
			return nil, err
		}
		a.loaded = true
	}
	now := a.cfg.clk.Now()
	var out client.MemoryReply
	switch m.MessageType {
	case client.MemoryPut:
		e, err := a.check(req.Entry, now)
		if err != nil {
			return nil, err
		}
		if err := a.sync(ctx, now); err != nil {
			return nil, err
		}
		var (
			reserved bool
			prev     *client.MemoryEntry // the live entry replaced, for undo
		)
		err = a.st.Update(ctx, func(s *stored) error {
			purge(s, now)
			if s.Entries == nil {
				s.Entries = map[string]client.MemoryEntry{}
			}
			old, had := s.Entries[e.Key]
			n, size := len(s.Entries), total(s)
			prev = nil
			if had {
				n, size, prev = n-1, size-entrySize(old), &old
			}
			if n+1 > a.cfg.MaxEntries {
				return errs.New(codes.ResourceExhausted, "%s holds %d entries, its limit", a.h.Address(), a.cfg.MaxEntries)
			}
			if size+entrySize(e) > a.cfg.MaxBytes {
				return errs.New(codes.ResourceExhausted, "%s would hold %d bytes, over its limit of %d", a.h.Address(), size+entrySize(e), a.cfg.MaxBytes)
			}
			r := recOf(e)
			if err := a.tellLedger(ctx, msgReserve, ledgerRequest{Key: keyHash(e.Key), Rec: &r}); err != nil {
				return err
			}
			reserved = true
			s.Entries[e.Key] = e
			return nil
		})
		if err != nil {
			if reserved {
				// The ledger counts an entry whose write failed (or may
				// have): put it back, and load and sync again next time.
				a.undo(ctx, e.Key, prev)
				a.loaded, a.synced = false, false
			}
			return nil, err
		}
		out.Entry = &e
	case client.MemoryGet:
		e, ok := a.st.Value.Entries[req.Key]
		if !ok || !e.Expires.After(now) {
			return nil, errs.New(codes.NotFound, "%s has no entry %q", a.h.Address(), clip(req.Key))
		}
		out.Entry = &e
	case client.MemoryDelete:
		if req.Key == "" {
			return nil, errs.New(codes.InvalidArgument, "%s: delete needs a key", a.h.Address())
		}
		had := false
		err := a.st.Update(ctx, func(s *stored) error {
			purge(s, now)
			_, had = s.Entries[req.Key]
			delete(s.Entries, req.Key)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if had {
			if err := a.tellLedger(ctx, msgRelease, ledgerRequest{Key: keyHash(req.Key)}); err != nil {
				// The entry is gone; the owner's account counts it until
				// it expires or the memory's next activation syncs.
				a.h.Logger().Warn("memory: the owner's ledger did not take a delete", "err", err)
				a.synced = false
			}
		}
	case client.MemoryList, client.MemorySearch:
		q := client.MemoryQuery{}
		if req.Query != nil {
			q = *req.Query
		}
		if q.Limit < 0 || q.Limit > maxLimit {
			return nil, errs.New(codes.InvalidArgument, "%s: limit %d: want 0 to %d", a.h.Address(), q.Limit, maxLimit)
		}
		if q.Limit == 0 {
			q.Limit = defLimit
		}
		var words []string
		if m.MessageType == client.MemorySearch {
			if len(req.Text) > maxSearch {
				return nil, errs.New(codes.InvalidArgument, "%s: search text over %d bytes", a.h.Address(), maxSearch)
			}
			words = strings.Fields(strings.ToLower(req.Text))
			if len(words) == 0 {
				return nil, errs.New(codes.InvalidArgument, "%s: search needs words", a.h.Address())
			}
		}
		keys := make([]string, 0, len(a.st.Value.Entries))
		for k := range a.st.Value.Entries {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			e := a.st.Value.Entries[k]
			if !e.Expires.After(now) || !strings.HasPrefix(k, q.Prefix) ||
				q.Category != "" && e.Category != q.Category || q.Tag != "" && !slices.Contains(e.Tags, q.Tag) ||
				!matches(e, words) {
				continue
			}
			out.Entries = append(out.Entries, e)
			if len(out.Entries) == q.Limit {
				break
			}
		}
	default:
		return nil, errs.New(codes.InvalidArgument, "%s: unknown message type %q: want memory.put, memory.get, memory.delete, memory.list or memory.search", a.h.Address(), clip(m.MessageType))
	}
	if m.Kind != grain.KindRequest {
		return nil, nil
	}
	r := m.Response()
	b, err := json.Marshal(out)
	if err != nil {
		return nil, errs.Wrap(codes.Internal, err, "%s: encode the reply", a.h.Address())
	}
	r.Data, r.DataType = b, "application/json"
	return r, nil
}

// check validates a put's entry and returns it as it is stored.
func (a *agent) check(e *client.MemoryEntry, now time.Time) (client.MemoryEntry, error) {
	bad := func(format string, args ...any) (client.MemoryEntry, error) {
		return client.MemoryEntry{}, errs.New(codes.InvalidArgument, "%s: put: "+format, append([]any{a.h.Address()}, args...)...)
	}
	if e == nil {
		return bad("no entry")
	}
	out := *e
	switch {
	case out.Key == "" || len(out.Key) > maxKey || !utf8.ValidString(out.Key):
		return bad("the key must be 1 to %d bytes of UTF-8", maxKey)
	case !utf8.ValidString(out.Text) || !utf8.ValidString(out.Category):
		return bad("text and category must be UTF-8")
	case len(out.Tags) > maxTags:
		return bad("%d tags, over %d", len(out.Tags), maxTags)
	case out.TTL < 0 || out.TTL > a.cfg.MaxTTL:
		return bad("ttl %v: want 0 (the default, %v) up to %v", out.TTL, a.cfg.DefaultTTL, a.cfg.MaxTTL)
	case len(out.Value) > 0 && !json.Valid(out.Value):
		return bad("the value is not JSON")
	}
	for _, t := range out.Tags {
		if t == "" || len(t) > maxTag || !utf8.ValidString(t) {
			return bad("a tag must be 1 to %d bytes of UTF-8", maxTag)
		}
	}
	if n := entrySize(out); n > a.cfg.MaxEntryBytes {
		return client.MemoryEntry{}, errs.New(codes.ResourceExhausted, "%s: put: the entry has %d bytes, over the limit of %d", a.h.Address(), n, a.cfg.MaxEntryBytes)
	}
	if out.TTL == 0 {
		out.TTL = a.cfg.DefaultTTL
	}
	out.Created, out.Expires = now, now.Add(out.TTL)
	return out, nil
}

// purge drops the entries expired at now.
func purge(s *stored, now time.Time) {
	for k, e := range s.Entries {
		if !e.Expires.After(now) {
			delete(s.Entries, k)
		}
	}
}

// entrySize is what an entry counts against the bounds.
func entrySize(e client.MemoryEntry) int {
	n := len(e.Key) + len(e.Text) + len(e.Value) + len(e.Category)
	for _, t := range e.Tags {
		n += len(t)
	}
	return n
}

func total(s *stored) int {
	n := 0
	for _, e := range s.Entries {
		n += entrySize(e)
	}
	return n
}

// matches reports whether e contains every word (lower case).
func matches(e client.MemoryEntry, words []string) bool {
	if len(words) == 0 {
		return true
	}
	hay := strings.ToLower(e.Key + "\n" + e.Text + "\n" + e.Category + "\n" + strings.Join(e.Tags, "\n") + "\n" + string(e.Value))
	for _, w := range words {
		if !strings.Contains(hay, w) {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
