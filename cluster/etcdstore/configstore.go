package etcdstore

import (
	"context"
	"encoding/json"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// ConfigStore is the grain.ConfigStore of a silo: CreateAgent's
// configurations as JSON objects under <prefix>configs/<address>. An
// activation reads its own when it first asks (Host.Config). Methods are safe
// for concurrent use; while etcd is away they return Unavailable.
type ConfigStore struct {
	client  *clientv3.Client
	root    string
	timeout time.Duration
}

// NewConfigStore returns the store of e's client and prefix.
func NewConfigStore(e *Store) *ConfigStore {
	return newConfigStore(e.Client(), e.Prefix())
}

func newConfigStore(c *clientv3.Client, prefix string) *ConfigStore {
	return &ConfigStore{client: c, root: prefix + "configs/", timeout: 5 * time.Second}
}

// Get implements grain.ConfigStore: nil if addr was never created.
func (s *ConfigStore) Get(ctx context.Context, addr grain.Address) (map[string]string, error) {
	octx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Get(octx, s.root+addr.String())
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "read the configuration of %s", addr)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var cfg map[string]string
	if err := json.Unmarshal(resp.Kvs[0].Value, &cfg); err != nil {
		return nil, errs.New(codes.Internal, "the configuration of %s is unreadable: %w", addr, err)
	}
	return cfg, nil
}

// Put implements grain.ConfigStore.
func (s *ConfigStore) Put(ctx context.Context, addr grain.Address, cfg map[string]string) error {
	if cfg == nil {
		cfg = map[string]string{}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return errs.New(codes.Internal, "encode the configuration of %s: %w", addr, err)
	}
	octx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.client.Put(octx, s.root+addr.String(), string(b)); err != nil {
		return etcderr.FromCall(ctx, err, "store the configuration of %s", addr)
	}
	return nil
}

// Delete implements grain.ConfigStore.
func (s *ConfigStore) Delete(ctx context.Context, addr grain.Address) error {
	octx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.client.Delete(octx, s.root+addr.String()); err != nil {
		return etcderr.FromCall(ctx, err, "delete the configuration of %s", addr)
	}
	return nil
}
