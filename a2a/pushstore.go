package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv/push"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// maxPushConfigs bounds the push configs of one task.
const maxPushConfigs = 10

// pushStore is the SDK's push.ConfigStore in etcd, one key per config under
// a2a/push/<task id>/. It is a plain store: the SDK's handler checks that
// the caller may see the task (a task store Get) before every call. The
// configs of a finished task expire with it (see retention.go).
// Methods are safe for concurrent use.
type pushStore struct {
	cli    *clientv3.Client
	prefix string
}

var _ push.ConfigStore = (*pushStore)(nil)

func (s *pushStore) dir(id spec.TaskID) string { return s.prefix + pushDir + string(id) + "/" }

// checkConfig refuses what cannot be a webhook: the sender's SSRF guard
// checks where the URL resolves to when it is used.
func checkConfig(c *spec.PushConfig) error {
	if c == nil {
		return invalidParams("no push config")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalidParams("push config URL %q: want http(s)://host/...", clipString(c.URL))
	}
	if c.ID != "" && !validID(c.ID) {
		return invalidParams("push config id %q: want 1 to 128 of [A-Za-z0-9._-]", clipString(c.ID))
	}
	if len(c.URL) > 2048 || len(c.Token) > 1024 || c.Auth != nil && len(c.Auth.Credentials) > 4096 {
		return invalidParams("push config too large")
	}
	return nil
}

// Save implements push.ConfigStore.
func (s *pushStore) Save(ctx context.Context, id spec.TaskID, c *spec.PushConfig) (*spec.PushConfig, error) {
	if !validID(string(id)) {
		return nil, spec.ErrTaskNotFound
	}
	if err := checkConfig(c); err != nil {
		return nil, err
	}
	saved := *c
	if saved.Auth != nil {
		a := *saved.Auth
		saved.Auth = &a
	}
	if saved.ID == "" {
		saved.ID = grain.NewID()
	}
	saved.TaskID = id
	b, err := json.Marshal(&saved)
	if err != nil {
		return nil, err
	}
	key := s.dir(id) + saved.ID
	// At most maxPushConfigs per task: a config replaced in place is fine.
	resp, err := s.cli.Get(ctx, s.dir(id), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "a2a: push configs of %s", id)
	}
	if len(resp.Kvs) >= maxPushConfigs {
		replace := false
		for _, kv := range resp.Kvs {
			replace = replace || string(kv.Key) == key
		}
		if !replace {
			return nil, invalidParams("task %s has %d push configs already", id, len(resp.Kvs))
		}
	}
	// A config of a finished task goes on the task's retention lease (see
	// retention.go): the put is conditional on the task's revision, so a
	// terminal write in between (which puts the configs it sees on its
	// lease) makes it read the lease again.
	tkey := taskKey(ctx, s.prefix, id)
	for range 5 {
		var cmps []clientv3.Cmp
		var lease clientv3.LeaseID
		if tkey != "" {
			r, err := s.cli.Get(ctx, tkey, clientv3.WithKeysOnly())
			if err != nil {
				return nil, etcderr.FromCall(ctx, err, "a2a: save push config of %s", id)
			}
			if len(r.Kvs) == 0 {
				// The SDK saves a send's config before it creates the task.
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(tkey), "=", 0))
			} else {
				lease = clientv3.LeaseID(r.Kvs[0].Lease)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(tkey), "=", r.Kvs[0].ModRevision))
			}
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(b), withLease(lease)...)).Commit()
		if leaseGone(err) {
			return nil, spec.ErrTaskNotFound // its retention just ended
		}
		if err != nil {
			return nil, etcderr.FromCall(ctx, err, "a2a: save push config of %s", id)
		}
		if resp.Succeeded {
			return &saved, nil
		}
	}
	return nil, fmt.Errorf("a2a: save push config of %s: the task kept changing: %w", id, spec.ErrInternalError)
}

// Get implements push.ConfigStore.
func (s *pushStore) Get(ctx context.Context, id spec.TaskID, configID string) (*spec.PushConfig, error) {
	if !validID(string(id)) || !validID(configID) {
		return nil, push.ErrPushConfigNotFound
	}
	resp, err := s.cli.Get(ctx, s.dir(id)+configID)
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "a2a: get push config of %s", id)
	}
	if len(resp.Kvs) == 0 {
		return nil, push.ErrPushConfigNotFound
	}
	return decodePushConfig(resp.Kvs[0].Value)
}

func decodePushConfig(b []byte) (*spec.PushConfig, error) {
	var c spec.PushConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("a2a: corrupt push config: %w", err)
	}
	return &c, nil
}

// List implements push.ConfigStore.
func (s *pushStore) List(ctx context.Context, id spec.TaskID) ([]*spec.PushConfig, error) {
	if !validID(string(id)) {
		return []*spec.PushConfig{}, nil
	}
	// After the task store's write of a task, the SDK lists its configs
	// to send the event it wrote: the write read them (see sendState).
	kvs, ok := sendOf(ctx).takePushes(id)
	if !ok {
		resp, err := s.cli.Get(ctx, s.dir(id), clientv3.WithPrefix())
		if err != nil {
			return nil, etcderr.FromCall(ctx, err, "a2a: list push configs of %s", id)
		}
		kvs = resp.Kvs
	}
	out := make([]*spec.PushConfig, 0, len(kvs))
	for _, kv := range kvs {
		c, err := decodePushConfig(kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Delete implements push.ConfigStore.
func (s *pushStore) Delete(ctx context.Context, id spec.TaskID, configID string) error {
	if !validID(string(id)) || !validID(configID) {
		return nil
	}
	_, err := s.cli.Delete(ctx, s.dir(id)+configID)
	return etcderr.FromCall(ctx, err, "a2a: delete push config of %s", id)
}

// DeleteAll implements push.ConfigStore.
func (s *pushStore) DeleteAll(ctx context.Context, id spec.TaskID) error {
	if !validID(string(id)) {
		return nil
	}
	_, err := s.cli.Delete(ctx, s.dir(id), clientv3.WithPrefix())
	return etcderr.FromCall(ctx, err, "a2a: delete push configs of %s", id)
}

// clipString shortens a value a caller sent before it is echoed.
func clipString(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
