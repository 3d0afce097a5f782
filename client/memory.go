package client

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// The working memory: the built-in agent type Memory (package memory), an
// agent of which, Memory:owner:scope, keeps entries for a while (60
// minutes unless a put says otherwise), each with a category and tags,
// in the silo's state store. Memory reaches one from a client or, through
// the same Asker interface, from an agent (grain.Host has the same Ask).
//
//	mem := c.Memory("Memory:dev:notes") // from an agent: client.NewMemory(h, addr)
//	err := mem.Put(ctx, client.MemoryEntry{Key: "plan", Text: "ship it", Category: "decision", Tags: []string{"q3"}})
//	e, err := mem.Get(ctx, "plan")
//	found, err := mem.Search(ctx, "ship", 10)

// MemoryType is the working memory's agent type.
const MemoryType = "Memory"

// The message types a Memory agent answers (data: a MemoryRequest as
// JSON; reply data: a MemoryReply as JSON).
const (
	MemoryPut    = "memory.put"
	MemoryGet    = "memory.get"
	MemoryDelete = "memory.delete"
	MemoryList   = "memory.list"
	MemorySearch = "memory.search"
)

// MemoryEntry is one entry of a working memory.
type MemoryEntry struct {
	Key string `json:"key"`
	// Text and Value are what is kept: text, and any JSON value.
	Text  string          `json:"text,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`
	// Category and Tags classify the entry for List.
	Category string   `json:"category,omitempty"`
	Tags     []string `json:"tags,omitempty"`
	// TTL, on a put, is how long the entry is kept, in JSON as
	// nanoseconds (0: the memory's default, 60 minutes).
	TTL time.Duration `json:"ttl,omitempty"`
	// Created and Expires are set by the memory.
	Created time.Time `json:"created,omitzero"`
	Expires time.Time `json:"expires,omitzero"`
}

// MemoryQuery selects entries for List: those whose key starts with
// Prefix, of Category, and carrying Tag (each if set), at most Limit
// (0: 100), by key.
type MemoryQuery struct {
	Prefix   string `json:"prefix,omitempty"`
	Category string `json:"category,omitempty"`
	Tag      string `json:"tag,omitempty"`
	Limit    int    `json:"limit,omitempty"`
}

// MemoryRequest is the data of a message to a Memory agent: Entry for a
// put; Key for a get or a delete; Query for a list; Query and Text for a
// search (entries that contain every word of Text in their key, text,
// category, tags or value; case-insensitive).
type MemoryRequest struct {
	Entry *MemoryEntry `json:"entry,omitempty"`
	Key   string       `json:"key,omitempty"`
	Query *MemoryQuery `json:"query,omitempty"`
	Text  string       `json:"text,omitempty"`
}

// MemoryReply is the data of a Memory agent's reply: the entry of a get
// or put, the entries of a list or search.
type MemoryReply struct {
	Entry   *MemoryEntry  `json:"entry,omitempty"`
	Entries []MemoryEntry `json:"entries,omitempty"`
}

// Asker sends a request and waits for its reply: a Client, or an agent's
// grain.Host.
type Asker interface {
	Ask(ctx context.Context, to string, msg *Message) (*Message, error)
}

// Memory is a typed handle on a working memory agent.
type Memory struct {
	a    Asker
	addr string
}

// NewMemory returns a handle on the Memory agent at addr
// (Memory:owner:scope) reached through a.
func NewMemory(a Asker, addr string) *Memory { return &Memory{a: a, addr: addr} }

// Memory returns a handle on the working memory agent at addr
// (Memory:owner:scope, or Memory:scope for the client's own), reached
// through this client: NewMemory(c, addr).
func (c *Client) Memory(addr string) *Memory { return NewMemory(c, addr) }

// Address is the memory agent's address.
func (m *Memory) Address() string { return m.addr }

func (m *Memory) call(ctx context.Context, typ string, req MemoryRequest) (*MemoryReply, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "memory: %w", err)
	}
	r, err := m.a.Ask(ctx, m.addr, &Message{MessageType: typ, Data: b, DataType: "application/json"})
	if err != nil {
		return nil, err
	}
	var out MemoryReply
	if len(r.Data) > 0 {
		if err := json.Unmarshal(r.Data, &out); err != nil {
			return nil, errs.New(codes.Internal, "memory: the turn of %s ran, but its reply does not decode: %w", m.addr, err)
		}
	}
	return &out, nil
}

// Put stores e (replacing an entry of the same key) and returns it as
// stored, with its times. Over the memory's bounds it is
// ResourceExhausted.
func (m *Memory) Put(ctx context.Context, e MemoryEntry) (MemoryEntry, error) {
	r, err := m.call(ctx, MemoryPut, MemoryRequest{Entry: &e})
	if err != nil || r.Entry == nil {
		return MemoryEntry{}, err
	}
	return *r.Entry, nil
}

// Get returns the entry of key; NotFound if there is none (or it expired).
func (m *Memory) Get(ctx context.Context, key string) (MemoryEntry, error) {
	r, err := m.call(ctx, MemoryGet, MemoryRequest{Key: key})
	if err != nil {
		return MemoryEntry{}, err
	}
	if r.Entry == nil {
		return MemoryEntry{}, errs.New(codes.Internal, "memory: the turn of %s ran, but its reply has no entry", m.addr)
	}
	return *r.Entry, nil
}

// Delete removes the entry of key (none: no error).
func (m *Memory) Delete(ctx context.Context, key string) error {
	_, err := m.call(ctx, MemoryDelete, MemoryRequest{Key: key})
	return err
}

// List returns the entries q selects, by key.
func (m *Memory) List(ctx context.Context, q MemoryQuery) ([]MemoryEntry, error) {
	r, err := m.call(ctx, MemoryList, MemoryRequest{Query: &q})
	if err != nil {
		return nil, err
	}
	return r.Entries, nil
}

// Search returns up to limit (0: 100) entries that contain every word of
// text, by key.
func (m *Memory) Search(ctx context.Context, text string, limit int) ([]MemoryEntry, error) {
	r, err := m.call(ctx, MemorySearch, MemoryRequest{Text: text, Query: &MemoryQuery{Limit: limit}})
	if err != nil {
		return nil, err
	}
	return r.Entries, nil
}
