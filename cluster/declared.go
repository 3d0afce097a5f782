package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdwatch"
	"github.com/agentsilo/agentsilo/internal/outbound"
	"github.com/agentsilo/agentsilo/llm"
)

// Agent types declared without code: model agents (package llm) whose
// definitions live in etcd under <prefix>types/declared/<Type>, as JSON.
// Every silo reads them before it serves, registers each in its registry
// (grain.Registry.Replace, with llm.Factory), and follows the prefix with
// a watch: a definition stored is served at once, a replaced one from the
// next activation (the activations of the old one on this silo are
// deactivated after their current turn), a deleted one is removed (its
// activations likewise). The TypeAdmin service (declared_admin.go) writes
// them. A definition holds no API key, only the name of the environment
// variable that holds it on each silo.

// declaredDir is where the definitions live, under the silo's etcd prefix.
const declaredDir = "types/declared/"

// declaredTypes follows the declared types in etcd and keeps the silo's
// registry in step with them.
type declaredTypes struct {
	client *clientv3.Client
	dir    string // the etcd prefix plus declaredDir
	// etcd reads the definitions (load) and follows them (start).
	etcd etcdwatch.Follower
	reg  *grain.Registry
	opts []llm.Option
	// audit records definitions applied and deleted (nil: off).
	audit *audit.Log
	// ownerDailyTokens is --llm-owner-daily-tokens (0: none).
	ownerDailyTokens int64
	clk              clock.Clock
	logger           *slog.Logger
	// model is the transport of the model calls (closed with the silo).
	model *http.Transport

	mu sync.Mutex
	// defs are the definitions applied, by type name (the stored JSON).
	defs map[string][]byte
	// applied is the etcd revision up to which the definitions are
	// applied; changed is closed (and replaced) whenever it grows.
	applied int64
	changed chan struct{}
	// rt, once set (the runtime is made after the first load), has the
	// activations of a replaced or removed type deactivated.
	rt *grain.Runtime

	// ctx ends with close: it bounds the watch and the deactivations.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup
}

// declaredModelIdleConns bounds the idle connections the declared types
// keep to their models (as package llm's own client does).
const declaredModelIdleConns = 1024

// newDeclaredTypes makes the follower of the declared types of the silo's
// etcd; load reads them, start follows them.
func newDeclaredTypes(client *clientv3.Client, prefix string, reg *grain.Registry, cfg *SiloConfig, extra ...llm.Option) *declaredTypes {
	model := outbound.Transport(cfg.LLM.AllowPrivateNetworks)
	// The declared types' conversations share it: many at once to one
	// model's host must not each open (and close) a connection, as they
	// would past Go's default of 2 idle ones per host.
	model.MaxIdleConns, model.MaxIdleConnsPerHost = declaredModelIdleConns, declaredModelIdleConns
	tp := cfg.TracerProvider
	var tracer []llm.Option
	if tp != nil {
		tracer = append(tracer, llm.WithTracerProvider(tp))
	}
	d := &declaredTypes{
		client:           client,
		dir:              prefix + declaredDir,
		reg:              reg,
		clk:              cfg.clock,
		logger:           cfg.Logger,
		model:            model,
		defs:             make(map[string][]byte),
		ownerDailyTokens: cfg.LLM.OwnerDailyTokens,
		changed:          make(chan struct{}),
		opts: append([]llm.Option{
			llm.WithHTTPClient(&http.Client{Transport: modelTransport{model}}),
			// The resume reminder's period is at least the silo's
			// shortest, which refuses shorter ones.
			llm.WithResumeReminder(llm.DefaultResumeAfter, max(llm.DefaultResumePeriod, cfg.MinReminderPeriod)),
		}, append(tracer, extra...)...),
	}
	if d.clk == nil {
		d.clk = clock.Real{}
	}
	d.etcd = etcdwatch.Follower{
		Client: client,
		Key:    d.dir,
		Prefix: true,
		What:   "declared types: read the definitions",
		Clock:  d.clk,
		Load:   d.loadAll,
		Events: d.apply,
		Failed: func(err error) {
			d.logger.Warn("declared types: watching etcd failed; the types served stay; retrying", "err", err)
		},
	}
	return d
}

// modelTransport is the model calls' transport: the SSRF guard of calls
// out of the cluster unless --llm-allow-private-networks, its refusal
// PermissionDenied and naming the flag (a model call refused so ends its
// turn, as asking again would be refused the same way).
type modelTransport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t modelTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil && errors.Is(err, outbound.ErrBlocked) {
		return nil, errs.Wrap(codes.PermissionDenied, err, "model endpoint %s is on a loopback or private address, which model agents reach only on silos started with --llm-allow-private-networks (SiloConfig.LLM.AllowPrivateNetworks)", r.URL.Host)
	}
	return resp, err
}

// load reads every definition, registering, replacing and removing types
// to match, and returns the revision read.
func (d *declaredTypes) load(ctx context.Context) (int64, error) { return d.etcd.Read(ctx) }

// loadAll takes in every stored definition, read at rev, registering,
// replacing and removing types to match: at load, and again after a
// broken watch.
func (d *declaredTypes) loadAll(kvs []*mvccpb.KeyValue, rev int64) error {
	stored := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		name := strings.TrimPrefix(string(kv.Key), d.dir)
		stored[name] = true
		d.put(name, kv.Value)
	}
	// What the registry holds of an earlier run (a silo started again
	// after a fence shares its program's registry), and etcd no longer.
	for _, name := range d.reg.Names() {
		if d.reg.Replaceable(name) && !stored[name] {
			d.remove(name)
		}
	}
	d.advance(rev)
	return nil
}

// apply takes in the changes of one watch response, which bring the
// definitions to rev.
func (d *declaredTypes) apply(evs []*clientv3.Event, rev int64) {
	for _, ev := range evs {
		name := strings.TrimPrefix(string(ev.Kv.Key), d.dir)
		switch ev.Type {
		case clientv3.EventTypePut:
			d.put(name, ev.Kv.Value)
		case clientv3.EventTypeDelete:
			d.remove(name)
		}
	}
	d.advance(rev)
}

// put registers, or replaces, the type of a stored definition.
func (d *declaredTypes) put(name string, value []byte) {
	d.mu.Lock()
	same := bytes.Equal(d.defs[name], value) && d.reg.Replaceable(name)
	d.mu.Unlock()
	if same {
		return
	}
	def, err := llm.ParseDefinition(value)
	if err == nil && def.Type != name {
		err = errs.New(codes.InvalidArgument, "the definition's type is %q", def.Type)
	}
	if err != nil {
		d.logger.Error("declared types: a stored definition does not parse; the type is not served", "type", name, "err", err)
		return
	}
	if lim := d.ownerDailyTokens; lim > 0 && (def.Limits.OwnerDailyTokens == 0 || def.Limits.OwnerDailyTokens > lim) {
		def.Limits.OwnerDailyTokens = lim
	}
	if def.Limits.OwnerDailyTokens > 0 {
		// Every silo serves the same declared types, so each has the
		// budget's type wherever an owner's budget agent is placed.
		if err := llm.RegisterBudget(d.reg); err != nil {
			d.logger.Error("declared types: the budget's agent type is not served on this silo", "type", llm.BudgetType, "err", err)
		}
	}
	if def.Conversation.Shared {
		if err := llm.RegisterSession(d.reg, d.opts...); err != nil {
			d.logger.Error("declared types: the shared sessions' agent type is not served on this silo", "type", llm.SharedSessionType, "err", err)
		}
	}
	f, info, err := llm.Factory(d.reg, def, d.opts...)
	if err != nil {
		// Most likely the API key's variable is not set on this silo: the
		// type is served, and each activation fails saying why.
		d.logger.Warn("declared types: the type's agents cannot start on this silo", "type", name, "err", err)
		cause := err
		f = func(grain.Host) (grain.Agent, error) { return nil, cause }
		info = grain.TypeInfo{Description: def.Description}
	}
	if err := d.reg.Replace(name, f, info); err != nil {
		d.logger.Error("declared types: the type is not served on this silo", "type", name, "err", err)
		return
	}
	d.mu.Lock()
	d.defs[name] = bytes.Clone(value)
	d.mu.Unlock()
	d.logger.Info("declared type served", "type", name)
	d.deactivate(name)
}

// remove removes a declared type that etcd no longer holds.
func (d *declaredTypes) remove(name string) {
	d.mu.Lock()
	delete(d.defs, name)
	d.mu.Unlock()
	if !d.reg.Replaceable(name) {
		return
	}
	if err := d.reg.Remove(name); err != nil {
		d.logger.Error("declared types: remove", "type", name, "err", err)
		return
	}
	d.logger.Info("declared type removed", "type", name)
	d.deactivate(name)
}

// deactivate ends this silo's activations of name after their current
// turns, so that the next message finds the type as it now is.
func (d *declaredTypes) deactivate(name string) {
	d.mu.Lock()
	rt, ctx := d.rt, d.ctx
	d.mu.Unlock()
	if rt == nil {
		return
	}
	acts := rt.Activations(name)
	if len(acts) == 0 {
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		for _, a := range acts {
			if _, err := rt.Deactivate(ctx, a.Address); err != nil && ctx.Err() == nil {
				d.logger.Warn("declared types: deactivate an activation of a changed type", "agent", a.Address, "err", err)
			}
		}
	}()
}

// advance records that the definitions are applied up to rev.
func (d *declaredTypes) advance(rev int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rev <= d.applied {
		return
	}
	d.applied = rev
	close(d.changed)
	d.changed = make(chan struct{})
}

// waitApplied waits until the definitions are applied up to rev, and
// returns the revision applied; it returns early with ctx's error.
func (d *declaredTypes) waitApplied(ctx context.Context, rev int64) (int64, error) {
	for {
		d.mu.Lock()
		applied, changed := d.applied, d.changed
		d.mu.Unlock()
		if applied >= rev {
			return applied, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return applied, errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "declared types: revision %d not applied (at %d)", rev, applied)
		}
	}
}

// declared reports whether name is a declared type this silo serves.
func (d *declaredTypes) declared(name string) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.defs[name]
	return ok
}

// start follows the definitions from rev on (reading them all again after
// a broken watch), with rt's activations of a changed type deactivated.
func (d *declaredTypes) start(rt *grain.Runtime, rev int64) {
	ctx, cancel := context.WithCancel(context.Background())
	d.mu.Lock()
	d.rt, d.ctx, d.cancel = rt, ctx, cancel
	d.mu.Unlock()
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		d.etcd.Follow(ctx, rev)
	}()
}

// close stops following, and the deactivations under way, and closes the
// model calls' idle connections.
func (d *declaredTypes) close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	cancel := d.cancel
	d.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	d.bg.Wait()
	d.model.CloseIdleConnections()
}

// storedDefinition is the JSON a definition is stored as.
func storedDefinition(def llm.Definition) ([]byte, error) {
	b, err := json.Marshal(def)
	if err != nil {
		return nil, errs.Wrap(codes.Internal, err, "encode the definition of %s", def.Type)
	}
	return b, nil
}
