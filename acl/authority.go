package acl

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// Config configures an Authority.
type Config struct {
	// Store keeps the ACL. Required.
	Store Store
	// Seed, if not nil, is stored when the store holds no ACL yet (the
	// --acl-file): never over an ACL that is there.
	Seed *Document
	// OnDenied, if set, is called with the permission missing each time
	// Authorize or AuthorizeAdmin denies a call (for metrics). It is called
	// concurrently and must be quick.
	OnDenied func(need Permission)
	// Logger receives the authority's logs. Default: slog.Default().
	Logger *slog.Logger
	// Audit, if not nil, records the changes made through the admin
	// service (AdminServer).
	Audit *audit.Log
}

// Authority is a silo's view of the cluster's ACL: it watches the Store and
// keeps the compiled Policy of the latest document in force, so checks never
// wait on the store; if the store is lost, the last rules stay in force.
// Changes go through Update, a compare-and-swap on the store's revision.
//
// Its lifecycle is NewAuthority, Start, Close. All methods are safe for
// concurrent use; Check may be called from any goroutine at any rate.
type Authority struct {
	cfg    Config
	logger *slog.Logger

	policy atomic.Pointer[Policy] // nil until the first load
	rev    atomic.Int64
	refuse atomic.Pointer[refuser] // see Refuse; nil: none

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when policy changes

	loaded    chan struct{}
	loadOnce  sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// NewAuthority checks cfg and returns an Authority; Start begins watching.
func NewAuthority(cfg Config) (*Authority, error) {
	if cfg.Store == nil {
		return nil, errs.New(codes.InvalidArgument, "acl: NewAuthority: nil Store")
	}
	if cfg.Seed != nil {
		if err := cfg.Seed.Validate(); err != nil {
			return nil, err // InvalidArgument
		}
		seed := cfg.Seed.Clone()
		seed.normalize()
		cfg.Seed = &seed
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Authority{
		cfg:     cfg,
		logger:  cfg.Logger,
		changed: make(chan struct{}),
		loaded:  make(chan struct{}),
		done:    make(chan struct{}),
	}, nil
}

// Start seeds the store if it is empty and a seed was given, and starts
// watching it. It waits, bounded by ctx, for the first load; if ctx ends
// first, Start returns its error but the watch goes on (checks of other
// owners' agents are Unavailable until the ACL is loaded).
func (a *Authority) Start(ctx context.Context) error {
	wctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go a.run(wctx)
	select {
	case <-a.loaded:
		return nil
	case <-ctx.Done():
		return errs.Wrap(codes.Unavailable, ctx.Err(), "acl: not loaded yet")
	}
}

func (a *Authority) run(ctx context.Context) {
	defer close(a.done)
	if a.cfg.Seed != nil {
		a.seed(ctx)
	}
	_ = a.cfg.Store.Watch(ctx, a.install)
}

// seed stores the seed document unless an ACL is stored, retrying while the
// store is away.
func (a *Authority) seed(ctx context.Context) {
	b := retry.New(100*time.Millisecond, 3*time.Second, nil)
	for ctx.Err() == nil {
		_, err := a.cfg.Store.Put(ctx, *a.cfg.Seed, 0)
		switch {
		case err == nil:
			a.logger.Info("acl: seeded from the ACL file", "rules", len(a.cfg.Seed.Rules), "groups", len(a.cfg.Seed.Groups))
			return
		case errors.Is(err, ErrConflict):
			a.logger.Info("acl: an ACL is stored already; the ACL file is not used")
			return
		case ctx.Err() != nil:
			return
		}
		a.logger.Warn("acl: seeding the ACL failed; retrying", "err", err)
		b.Wait(ctx, nil)
	}
}

// install makes d (at rev) the policy in force.
func (a *Authority) install(d Document, rev int64) {
	p, err := Compile(d)
	if err != nil {
		a.logger.Error("acl: ignoring an invalid ACL; the last rules stay in force", "err", err, "revision", rev)
		return
	}
	a.mu.Lock()
	a.policy.Store(p)
	a.rev.Store(rev)
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
	a.loadOnce.Do(func() { close(a.loaded) })
	a.logger.Debug("acl: in force", "revision", rev, "rules", len(d.Rules), "groups", len(d.Groups))
}

// Close stops watching. Checks go on with the last policy.
func (a *Authority) Close() {
	a.closeOnce.Do(func() {
		if a.cancel != nil {
			a.cancel()
			<-a.done
		}
	})
}

// Policy returns the policy in force and its revision; nil before the first
// load.
func (a *Authority) Policy() (*Policy, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.policy.Load(), a.rev.Load()
}

// Check decides as Policy.Check does with the policy in force. Before the
// first load only the caller's own agents are allowed.
func (a *Authority) Check(c *Caller, owner, alias string, need Permission) Decision {
	if owner == c.Principal {
		return Decision{Allowed: true, Reason: OwnAgent, Granted: All}
	}
	p := a.policy.Load()
	if p == nil {
		return Decision{Reason: DefaultDeny}
	}
	return p.Check(c, owner, alias, need)
}

// refuser is what Refuse sets.
type refuser struct {
	f func(principal string) (reason string, refused bool)
}

// Refuse sets f, which Authorize consults before anything else when a
// call needs Message: a principal f refuses may message no agent, its own
// included, whatever the rules grant (PermissionDenied with f's reason).
// The silo refuses the principals of outside agents the directory holds
// at trust level observe. f is called concurrently and must be quick; nil
// removes it.
func (a *Authority) Refuse(f func(principal string) (reason string, refused bool)) {
	if f == nil {
		a.refuse.Store(nil)
		return
	}
	a.refuse.Store(&refuser{f})
}

// Authorize returns nil if c holds need on the agent typ:owner:alias:
// PermissionDenied naming the permission if not, Unavailable if the ACL has
// not been loaded yet. It allocates only for the error.
func (a *Authority) Authorize(c *Caller, typ, owner, alias string, need Permission) error {
	if r := a.refuse.Load(); r != nil && need&Message != 0 {
		if reason, refused := r.f(c.Principal); refused {
			if f := a.cfg.OnDenied; f != nil {
				f(need)
			}
			return errs.New(codes.PermissionDenied, "%s may not message %s:%s:%s: %s", c.Principal, typ, owner, alias, reason)
		}
	}
	if owner == c.Principal {
		return nil
	}
	p := a.policy.Load()
	if p == nil {
		return errs.New(codes.Unavailable, "acl: the access control list is not loaded yet; retry")
	}
	if p.Check(c, owner, alias, need).Allowed {
		return nil
	}
	if f := a.cfg.OnDenied; f != nil {
		f(need)
	}
	return Denied(c, need, typ+":"+owner+":"+alias)
}

// Allowed reports whether c holds need on the agent, like Authorize but
// without an error or OnDenied: for filtering what c may see.
func (a *Authority) Allowed(c *Caller, owner, alias string, need Permission) bool {
	if owner == c.Principal {
		return true
	}
	p := a.policy.Load()
	return p != nil && p.Check(c, owner, alias, need).Allowed
}

// IsAdmin reports whether c may change the ACL, like AuthorizeAdmin but
// without an error or OnDenied: for choosing what c may see, which is no
// refusal.
func (a *Authority) IsAdmin(c *Caller) bool {
	p := a.policy.Load()
	return p != nil && p.CheckAdmin(c).Allowed
}

// AuthorizeAdmin returns nil if c may change the ACL (Admin on system:acl,
// or group admins), else PermissionDenied.
func (a *Authority) AuthorizeAdmin(c *Caller) error {
	p := a.policy.Load()
	if p == nil {
		return errs.New(codes.Unavailable, "acl: the access control list is not loaded yet; retry")
	}
	if p.CheckAdmin(c).Allowed {
		return nil
	}
	if f := a.cfg.OnDenied; f != nil {
		f(Admin)
	}
	return Denied(c, Admin, AdminOwner+":"+AdminAgent)
}

// AuthorizeAudit returns nil if c may read the audit log (Audit on
// system:audit, which the principal system owns), else PermissionDenied.
func (a *Authority) AuthorizeAudit(c *Caller) error {
	if c.Principal == AdminOwner {
		return nil
	}
	p := a.policy.Load()
	if p == nil {
		return errs.New(codes.Unavailable, "acl: the access control list is not loaded yet; retry")
	}
	if p.Check(c, AdminOwner, AuditAgent, Audit).Allowed {
		return nil
	}
	if f := a.cfg.OnDenied; f != nil {
		f(Audit)
	}
	return Denied(c, Audit, AdminOwner+":"+AuditAgent)
}

// Update changes the stored ACL with f, which edits a copy of the current
// document, as a compare-and-swap on its revision: if rev is not 0 it must
// be the stored revision (else ErrConflict); if rev is 0, Update reads again
// and retries while others change the document concurrently. It returns the
// document stored and its revision, once that revision is in force here.
func (a *Authority) Update(ctx context.Context, rev int64, f func(d *Document) error) (Document, int64, error) {
	for attempt := 0; ; attempt++ {
		d, cur, err := a.cfg.Store.Get(ctx)
		if err != nil {
			return Document{}, 0, err
		}
		if rev != 0 && cur != rev {
			return Document{}, 0, ErrConflict
		}
		d.normalize()
		if err := f(&d); err != nil {
			return Document{}, 0, err
		}
		if err := d.Validate(); err != nil {
			return Document{}, 0, err // InvalidArgument
		}
		next, err := a.cfg.Store.Put(ctx, d, cur)
		if errors.Is(err, ErrConflict) && rev == 0 && attempt < 16 {
			continue
		}
		if err != nil {
			return Document{}, 0, err
		}
		return d, next, a.WaitRevision(ctx, next)
	}
}

// WaitRevision waits, bounded by ctx, until the policy in force here is at
// revision rev or later.
func (a *Authority) WaitRevision(ctx context.Context, rev int64) error {
	for {
		a.mu.Lock()
		cur, changed := a.rev.Load(), a.changed
		loaded := a.policy.Load() != nil
		a.mu.Unlock()
		if loaded && cur >= rev {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "acl: waiting for revision %d to be in force", rev)
		}
	}
}
