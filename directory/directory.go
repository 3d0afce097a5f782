package directory

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/etcdwatch"
	"github.com/agentsilo/agentsilo/internal/names"
)

// Config configures a Directory. Start from DefaultConfig.
type Config struct {
	// Client and Prefix are where the outside entries are kept: the
	// cluster's etcd, under the silo's prefix.
	Client *clientv3.Client
	Prefix string
	// Types lists the cluster's agent types (every silo's). Nil: none.
	Types func(ctx context.Context) ([]grain.TypeInfo, error)
	// TypesEvery is how often Types is asked again, so that the types of
	// silos that come and go appear and disappear. Default: 5 s.
	TypesEvery time.Duration
	// Owns reports whether this silo refreshes the named outside entry:
	// exactly one silo of the cluster should (the entry's owner in the
	// membership view), so an outside agent is asked once per Refresh,
	// not once per silo. Nil: this one refreshes every entry.
	Owns func(name string) bool
	// Refresh is how often an outside entry is fetched again (its card,
	// its tools), each entry's time moved by up to a tenth of it at random
	// so that entries added together are not fetched together
	// (--directory-refresh). Default: 2 min.
	Refresh time.Duration
	// Transport makes the requests to outside entries. The silo gives the
	// A2A server's, which refuses internal addresses unless
	// --a2a-allow-private-networks. Default: http.DefaultTransport.
	Transport http.RoundTripper
	// FetchTimeout bounds one refresh of one entry. Default: 10 s.
	FetchTimeout time.Duration
	// Parallel bounds the refreshes in flight on this silo. Default: 4.
	Parallel int
	// MaxEntries bounds the outside entries. Default: 100,000.
	MaxEntries int
	// Logger receives the directory's logs (never an entry's headers).
	// Default: slog.Default().
	Logger *slog.Logger

	// siloClock holds the clock that schedules refreshes and stamps
	// last-seen times (none: the real clock): the silo's, which it sets
	// with clock.Wire, as this package's tests do; users cannot reach it.
	siloClock
}

// siloClock is the clock.Slot embedded in Config, under a name users cannot
// refer to.
type siloClock = clock.Slot

var _ clock.Slotted = (*Config)(nil)

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{TypesEvery: 5 * time.Second, Refresh: 2 * time.Minute, FetchTimeout: 10 * time.Second, Parallel: 4, MaxEntries: 100_000}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil:
		return errs.New(codes.InvalidArgument, "directory: no etcd Client")
	case c.Refresh < time.Second:
		return errs.New(codes.InvalidArgument, "directory: Refresh %v must be at least 1s", c.Refresh)
	case c.TypesEvery <= 0 || c.FetchTimeout <= 0 || c.Parallel < 1 || c.MaxEntries < 1:
		return errs.New(codes.InvalidArgument, "directory: TypesEvery, FetchTimeout, Parallel and MaxEntries must be positive")
	}
	return nil
}

// Directory is the searchable list of the cluster's agent types and of
// the outside A2A agents and MCP servers added to it (see the package
// doc). Its methods are safe for concurrent use; it checks no permission
// (see Service for that). Its lifecycle is New, Start, Close.
type Directory struct {
	cfg    Config
	logger *slog.Logger
	clk    clock.Clock
	etcd   etcdwatch.Follower // reads and follows the outside entries

	mu       sync.Mutex
	records  map[string]*record // outside entries by name
	statuses map[string]*status // refresh results by name (see record)
	types    []grain.TypeInfo   // the last Types answer
	rev      int64              // the etcd revision applied
	built    chan struct{}      // closed when an index is installed
	ix       atomic.Pointer[index]
	inflight map[string]bool // entries being refreshed here

	dirty  chan struct{} // an index build is due
	urgent chan struct{} // someone waits for the next build
	wake   chan struct{} // the refresher has new entries

	cancel context.CancelFunc
	bg     sync.WaitGroup
}

// Observed returns the name of the outside A2A agent at trust observe
// whose principal is principal, if there is one (as of the directory's
// last index: an entry counts once indexed, soon after it is added).
func (d *Directory) Observed(principal string) (string, bool) {
	ix := d.ix.Load()
	if ix == nil || ix.observed == nil {
		return "", false
	}
	name, ok := ix.observed[principal]
	return name, ok
}

// New checks cfg and returns a directory; Start loads it.
func New(cfg Config) (*Directory, error) {
	d := DefaultConfig()
	if cfg.TypesEvery == 0 {
		cfg.TypesEvery = d.TypesEvery
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = d.Refresh
	}
	if cfg.FetchTimeout == 0 {
		cfg.FetchTimeout = d.FetchTimeout
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = d.Parallel
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = d.MaxEntries
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clk := clock.Wired(&cfg.siloClock)
	if clk == nil {
		clk = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	dir := &Directory{
		cfg:      cfg,
		logger:   cfg.Logger.With("component", "directory"),
		clk:      clk,
		records:  make(map[string]*record),
		statuses: make(map[string]*status),
		inflight: make(map[string]bool),
		built:    make(chan struct{}),
		dirty:    make(chan struct{}, 1),
		urgent:   make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),
	}
	dir.ix.Store(buildIndex(nil, 0))
	dir.etcd = etcdwatch.Follower{
		Client: cfg.Client,
		Key:    cfg.Prefix + "directory/",
		Prefix: true,
		What:   "directory: read the entries",
		Clock:  clk,
		Load:   dir.loadAll,
		Events: dir.apply,
		Failed: func(err error) {
			dir.logger.Warn("directory: watching etcd failed; the entries held stay listed; retrying", "err", err)
		},
	}
	return dir, nil
}

func (d *Directory) key(dir, name string) string { return d.cfg.Prefix + dir + name }

// Start loads the outside entries and the types, and starts following
// etcd, refreshing the entries this silo owns and asking for the types
// again, until Close.
func (d *Directory) Start(ctx context.Context) error {
	rev, err := d.etcd.Read(ctx)
	if err != nil {
		return err
	}
	d.loadTypes(ctx)
	d.install()
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	d.bg.Add(4)
	go func() { defer d.bg.Done(); d.etcd.Follow(bctx, rev) }()
	go func() { defer d.bg.Done(); d.indexLoop(bctx) }()
	go func() { defer d.bg.Done(); d.refreshLoop(bctx) }()
	go func() { defer d.bg.Done(); d.typesLoop(bctx) }()
	return nil
}

// Close stops what Start started and waits for it.
func (d *Directory) Close() {
	if d.cancel != nil {
		d.cancel()
	}
	d.bg.Wait()
}

// loadAll takes in every outside entry and status, read at rev, replacing
// what is held: at Start, and again after a broken watch.
func (d *Directory) loadAll(kvs []*mvccpb.KeyValue, rev int64) error {
	d.mu.Lock()
	d.records = make(map[string]*record, len(kvs))
	d.statuses = make(map[string]*status, len(kvs))
	for _, kv := range kvs {
		d.applyPut(string(kv.Key), kv.Value, kv.CreateRevision)
	}
	d.rev = rev
	d.mu.Unlock()
	d.markDirty()
	return nil
}

// applyPut takes a stored entry or status in; d.mu is held.
func (d *Directory) applyPut(key string, value []byte, createRev int64) {
	rest := strings.TrimPrefix(key, d.cfg.Prefix)
	if name, ok := strings.CutPrefix(rest, entriesDir); ok {
		spec, err := decodeSpec(value)
		if err != nil || spec.Name != name {
			d.logger.Error("directory: ignoring an unreadable entry in etcd", "entry", name, "err", err)
			return
		}
		r := &record{spec: spec, createRev: createRev}
		if st := d.statuses[name]; st != nil && st.Entry == createRev {
			r.status = st
		}
		d.records[name] = r
		return
	}
	if name, ok := strings.CutPrefix(rest, statusDir); ok {
		st, err := decodeStatus(value)
		if err != nil {
			d.logger.Error("directory: ignoring an unreadable status in etcd", "entry", name, "err", err)
			return
		}
		if old := d.statuses[name]; old != nil && old.Entry == st.Entry && st.LastAttempt.Before(old.LastAttempt) {
			return // an older one, after the refresher applied its own
		}
		d.statuses[name] = st
		if r := d.records[name]; r != nil && r.createRev == st.Entry {
			r.status = st
		}
	}
}

// applyDelete takes a deleted key in; d.mu is held.
func (d *Directory) applyDelete(key string) {
	rest := strings.TrimPrefix(key, d.cfg.Prefix)
	if name, ok := strings.CutPrefix(rest, entriesDir); ok {
		delete(d.records, name)
	} else if name, ok := strings.CutPrefix(rest, statusDir); ok {
		delete(d.statuses, name)
		if r := d.records[name]; r != nil {
			r.status = nil
		}
	}
}

// apply takes in the changes of one watch response, which bring the
// entries to rev, and wakes the index builder and the refresher.
func (d *Directory) apply(evs []*clientv3.Event, rev int64) {
	if len(evs) == 0 {
		return // a progress notification: nothing to index or refresh
	}
	d.mu.Lock()
	for _, ev := range evs {
		switch ev.Type {
		case clientv3.EventTypePut:
			d.applyPut(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.CreateRevision)
		case clientv3.EventTypeDelete:
			d.applyDelete(string(ev.Kv.Key))
		}
	}
	d.rev = rev
	d.mu.Unlock()
	d.markDirty()
	d.poke()
}

// markDirty asks for an index build.
func (d *Directory) markDirty() {
	select {
	case d.dirty <- struct{}{}:
	default:
	}
}

// poke wakes the refresher.
func (d *Directory) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// indexLoop builds a new index after changes. A build of a large
// directory takes milliseconds while refreshes change it many times a
// second: after each build it waits nine times as long as the build took
// (at most a second), so builds use at most a tenth of a core, unless
// someone waits for the next one (Add, Remove).
func (d *Directory) indexLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.dirty:
		}
		start := time.Now()
		d.install()
		gap := min(9*time.Since(start), time.Second)
		if gap < time.Millisecond {
			continue
		}
		t := time.NewTimer(gap)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-d.urgent:
			t.Stop()
		}
	}
}

// install builds an index of what is held and puts it in place.
func (d *Directory) install() {
	d.mu.Lock()
	entries := make([]grain.DirectoryEntry, 0, len(d.records)+len(d.types))
	for _, ti := range d.types {
		entries = append(entries, typeEntry(ti))
	}
	for _, r := range d.records {
		entries = append(entries, r.entry())
	}
	rev := d.rev
	d.mu.Unlock()
	slices.SortFunc(entries, byKindName)
	ix := buildIndex(entries, rev)
	d.mu.Lock()
	d.ix.Store(ix)
	close(d.built)
	d.built = make(chan struct{})
	d.mu.Unlock()
}

// waitIndexed waits until the index holds what etcd held at rev.
func (d *Directory) waitIndexed(ctx context.Context, rev int64) error {
	for {
		d.mu.Lock()
		ch := d.built
		d.mu.Unlock()
		if d.ix.Load().rev >= rev {
			return nil
		}
		select {
		case d.urgent <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return errs.Wrap(codes.DeadlineExceeded, ctx.Err(), "directory: waiting for the change to be listed")
		}
	}
}

// typesLoop asks for the cluster's types every TypesEvery.
func (d *Directory) typesLoop(ctx context.Context) {
	t := d.clk.NewTimer(d.cfg.TypesEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if d.loadTypes(ctx) {
			d.markDirty()
		}
		t.Reset(d.cfg.TypesEvery)
	}
}

// loadTypes asks for the types and reports whether they changed. With an
// error it keeps what it got, if anything (a silo that did not answer).
func (d *Directory) loadTypes(ctx context.Context) bool {
	if d.cfg.Types == nil {
		return false
	}
	tctx, cancel := context.WithTimeout(ctx, d.cfg.FetchTimeout)
	defer cancel()
	types, err := d.cfg.Types(tctx)
	if err != nil {
		d.logger.Debug("directory: listing the types", "err", err)
		if len(types) == 0 {
			return false
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if reflect.DeepEqual(types, d.types) {
		return false
	}
	d.types = types
	return true
}

// The readers.

// maxLimit bounds the hits of one search.
const maxLimit = 1000

// maxQuery bounds a query's text.
const maxQuery = 4096

func checkQuery(q *grain.DirectoryQuery) error {
	switch q.Kind {
	case "", grain.KindType, grain.KindA2A, grain.KindMCP:
	default:
		return errs.New(codes.InvalidArgument, "directory: kind %q: want %q, %q or %q", clip(q.Kind, maxShort), grain.KindType, grain.KindA2A, grain.KindMCP)
	}
	switch {
	case len(q.Text) > maxQuery:
		return errs.New(codes.InvalidArgument, "directory: a query of %d bytes, at most %d", len(q.Text), maxQuery)
	case len(q.Tag) > maxShort:
		return errs.New(codes.InvalidArgument, "directory: a tag of %d bytes, at most %d", len(q.Tag), maxShort)
	case q.Limit < 0 || q.Limit > maxLimit:
		return errs.New(codes.InvalidArgument, "directory: limit %d: want 0 (20) to %d", q.Limit, maxLimit)
	}
	return nil
}

// Search ranks the entries matching q (see grain.Directory.Search).
func (d *Directory) Search(_ context.Context, q grain.DirectoryQuery) ([]grain.DirectoryHit, error) {
	if err := checkQuery(&q); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = 20
	}
	return d.ix.Load().search(q, limit), nil
}

// List returns the entries of q's kind and tag, by kind and name.
func (d *Directory) List(_ context.Context, q grain.DirectoryQuery) ([]grain.DirectoryEntry, error) {
	q.Text, q.Limit = "", 0
	if err := checkQuery(&q); err != nil {
		return nil, err
	}
	ix := d.ix.Load()
	out := []grain.DirectoryEntry{}
	for i := range ix.entries {
		if ix.keep(i, q) {
			out = append(out, ix.entries[i])
		}
	}
	return out, nil
}

// ListPage returns at most limit entries of q's kind and tag (0: 500, at
// most 1000) that come after the entry named after (kind/name; "": from
// the first), and the kind/name to pass as after for the next ones, ""
// if there are none.
func (d *Directory) ListPage(_ context.Context, q grain.DirectoryQuery, after string, limit int) ([]grain.DirectoryEntry, string, error) {
	q.Text, q.Limit = "", 0
	if err := checkQuery(&q); err != nil {
		return nil, "", err
	}
	switch {
	case limit < 0 || limit > maxLimit:
		return nil, "", errs.New(codes.InvalidArgument, "directory: limit %d: want 0 (500) to %d", limit, maxLimit)
	case limit == 0:
		limit = 500
	}
	ix := d.ix.Load()
	start := 0
	if after != "" {
		kind, name, ok := strings.Cut(after, "/")
		if !ok {
			return nil, "", errs.New(codes.InvalidArgument, "directory: after %q: want kind/name", clip(after, maxShort))
		}
		cur := grain.DirectoryEntry{Kind: kind, Name: name}
		start, _ = slices.BinarySearchFunc(ix.entries, cur, byKindName)
		if start < len(ix.entries) && byKindName(ix.entries[start], cur) == 0 {
			start++
		}
	}
	out := []grain.DirectoryEntry{}
	for i := start; i < len(ix.entries); i++ {
		if !ix.keep(i, q) {
			continue
		}
		if len(out) == limit {
			last := out[len(out)-1]
			return out, last.Kind + "/" + last.Name, nil
		}
		out = append(out, ix.entries[i])
	}
	return out, "", nil
}

// Get returns the entry name, or kind/name; NotFound if there is none. A
// plain name that is both an outside entry and a type is the outside entry.
func (d *Directory) Get(_ context.Context, name string) (grain.DirectoryEntry, error) {
	kind, n, hasKind := strings.Cut(name, "/")
	if !hasKind {
		kind, n = "", name
	}
	ix := d.ix.Load()
	var found *grain.DirectoryEntry
	for i := range ix.entries {
		e := &ix.entries[i]
		if e.Name != n || (kind != "" && e.Kind != kind) {
			continue
		}
		if found == nil || e.Kind != grain.KindType {
			found = e
		}
	}
	if found == nil {
		return grain.DirectoryEntry{}, errs.New(codes.NotFound, "directory: no entry %q", clip(name, maxShort))
	}
	return *found, nil
}

// The writers.

// Add adds or replaces an outside entry and returns it once this silo
// lists it; the silo that owns it fetches its card or tools at once.
func (d *Directory) Add(ctx context.Context, s Spec) (grain.DirectoryEntry, error) {
	if err := s.validate(); err != nil {
		return grain.DirectoryEntry{}, err
	}
	d.mu.Lock()
	_, exists := d.records[s.Name]
	n := len(d.records)
	d.mu.Unlock()
	if !exists && n >= d.cfg.MaxEntries {
		return grain.DirectoryEntry{}, errs.New(codes.ResourceExhausted, "directory: %d entries, the most it holds (MaxEntries)", n)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return grain.DirectoryEntry{}, errs.Wrap(codes.Internal, err, "directory: encode")
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A replaced entry keeps its status only if its URL is the same.
	ops := []clientv3.Op{clientv3.OpPut(d.key(entriesDir, s.Name), string(b))}
	d.mu.Lock()
	if r := d.records[s.Name]; r != nil && (r.spec.URL != s.URL || r.spec.Kind != s.Kind) {
		ops = append(ops, clientv3.OpDelete(d.key(statusDir, s.Name)))
	}
	d.mu.Unlock()
	resp, err := d.cfg.Client.Txn(octx).Then(ops...).Commit()
	if err != nil {
		return grain.DirectoryEntry{}, etcderr.FromCall(ctx, err, "directory: store entry %s", s.Name)
	}
	if err := d.waitIndexed(ctx, resp.Header.Revision); err != nil {
		return grain.DirectoryEntry{}, err
	}
	d.logger.Info("directory: entry added", "entry", s.Name, "kind", s.Kind, "host", hostOf(s.URL), "headers", len(s.Headers))
	return d.Get(ctx, s.Kind+"/"+s.Name)
}

// Remove removes an outside entry (NotFound if there is none), and
// returns once this silo no longer lists it.
func (d *Directory) Remove(ctx context.Context, name string) error {
	if !names.Valid(name) {
		return errs.New(codes.InvalidArgument, "directory: entry name %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", clip(name, maxShort))
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := d.cfg.Client.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(d.key(entriesDir, name)), ">", 0)).
		Then(clientv3.OpDelete(d.key(entriesDir, name)), clientv3.OpDelete(d.key(statusDir, name))).
		Commit()
	if err != nil {
		return etcderr.FromCall(ctx, err, "directory: remove entry %s", name)
	}
	if !resp.Succeeded {
		return errs.New(codes.NotFound, "directory: no outside entry %q", name)
	}
	d.logger.Info("directory: entry removed", "entry", name)
	return d.waitIndexed(ctx, resp.Header.Revision)
}

// Resolve returns the URL and headers of the outside entry name of kind
// (grain.KindA2A or grain.KindMCP), for the A2A and MCP agent types to call
// it by its name; ok is false if there is none. The headers are the
// caller's to use, never to show.
func (d *Directory) Resolve(_ context.Context, kind, name string) (endpoint string, headers map[string]string, ok bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.records[name]
	if r == nil || r.spec.Kind != kind {
		return "", nil, false, nil
	}
	h := make(map[string]string, len(r.spec.Headers))
	for k, v := range r.spec.Headers {
		h[k] = v
	}
	return r.spec.URL, h, true, nil
}

// SkillScopes returns the scopes the outside entry name of kind declares
// for its skill: a pinned skill's (Spec.Skills), else, for an A2A agent,
// the skill's on its card as last fetched; ok is false if it declares
// none (no such entry or skill, or a skill without scopes). A delegated
// token sent for a call of the skill carries these scopes.
func (d *Directory) SkillScopes(kind, name, skill string) (scopes []string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.records[name]
	if r == nil || r.spec.Kind != kind {
		return nil, false
	}
	for _, sk := range r.spec.Skills {
		if sk.Name == skill && len(sk.Scopes) > 0 {
			return slices.Clone(sk.Scopes), true
		}
	}
	if r.status != nil {
		for _, sk := range r.status.Skills {
			if sk.Name == skill && len(sk.Scopes) > 0 {
				return slices.Clone(sk.Scopes), true
			}
		}
	}
	return nil, false
}

// Len returns the number of entries listed: types and outside entries.
func (d *Directory) Len() int { return len(d.ix.Load().entries) }

func (s Spec) String() string { return fmt.Sprintf("%s %s %s", s.Kind, s.Name, s.URL) }

// hostOf is the host of a URL, what the logs say of an entry's URL (its
// path or query might carry what should have been a header).
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}
