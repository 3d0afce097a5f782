package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/internal/retry"
)

// The silos serving A2A keep each other's tasks from being stuck:
//
//   - Each holds an etcd lease (LeaseTTL) and a key a2a/ctl/silos/<silo>
//     on it; a task being worked on has a marker a2a/active/<id> naming the
//     silo and its lease (written with the task, see taskStore).
//   - When a silo's key goes (its lease expired: the process died or lost
//     etcd; or it revoked it at shutdown), every other silo fails the
//     tasks still marked with that silo and lease, with the reason, each
//     write a compare on the revision read, so one of them wins.
//   - At start, and whenever its watch breaks, a silo sweeps: any marker
//     whose silo holds no key with that lease is failed the same way
//     (tasks of a cluster that was down entirely).
//   - A cancel received by one silo for a turn that runs on another is a
//     key a2a/ctl/cancel/<id> naming the running silo, which cancels the
//     turn's context and deletes the key.
//
// One watch per silo on a2a/ctl/ carries both; it sees silo departures and
// cancels only, never the tasks' own writes.

// cancelKeyTTL bounds how long a cancel request stays in etcd if the silo
// it names never takes it (it died meanwhile).
const cancelKeyTTL = 60

// startLease grants the silo's lease, keeps it alive while base lives,
// and registers the silo on it.
func (s *Server) startLease(ctx context.Context) error {
	ttl := int64(s.cfg.LeaseTTL / time.Second)
	lease, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return fmt.Errorf("a2a: lease: %w", err)
	}
	if _, err := s.cli.Put(ctx, s.prefix+silosDir+s.cfg.Silo, strconv.FormatInt(int64(lease.ID), 10), clientv3.WithLease(lease.ID)); err != nil {
		s.cli.Revoke(context.WithoutCancel(ctx), lease.ID)
		return fmt.Errorf("a2a: register silo: %w", err)
	}
	ka, err := s.cli.KeepAlive(s.base, lease.ID)
	if err != nil {
		return fmt.Errorf("a2a: lease keepalive: %w", err)
	}
	s.lease.Store(int64(lease.ID))
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		for range ka {
		}
		if s.base.Err() == nil {
			s.logger.Error("a2a: the silo's lease is lost: other silos fail the tasks it was working on", "lease", lease.ID)
			s.regrant()
		}
	}()
	return nil
}

// regrant takes a new lease after the old one was lost, retrying until it
// succeeds or the server closes.
func (s *Server) regrant() {
	b := retry.EtcdLease.New(nil)
	for s.base.Err() == nil {
		ctx, cancel := context.WithTimeout(s.base, 10*time.Second)
		err := s.startLease(ctx)
		cancel()
		if err == nil {
			return
		}
		s.logger.Warn("a2a: new lease", "err", err)
		b.Wait(s.base, nil)
	}
}

// watchCtl follows a2a/ctl/ (departed silos, cancel requests) until the
// server closes, sweeping before each watch it starts.
func (s *Server) watchCtl() {
	defer s.bg.Done()
	b := retry.EtcdLease.New(nil)
	for s.base.Err() == nil {
		rev, err := s.sweep(s.base)
		if err != nil {
			s.logger.Warn("a2a: sweep of tasks of departed silos", "err", err)
		} else {
			b.Reset()
			wch := s.cli.Watch(clientv3.WithRequireLeader(s.base), s.prefix+ctlDir, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(rev+1))
			for resp := range wch {
				if err := resp.Err(); err != nil {
					s.logger.Warn("a2a: watch", "err", err)
					break
				}
				for _, ev := range resp.Events {
					s.ctlEvent(ev)
				}
			}
		}
		b.Wait(s.base, nil)
	}
}

// ctlEvent acts on one change under a2a/ctl/.
func (s *Server) ctlEvent(ev *clientv3.Event) {
	key := string(ev.Kv.Key)
	switch {
	case strings.HasPrefix(key, s.prefix+silosDir) && ev.Type == mvccpb.DELETE:
		name := strings.TrimPrefix(key, s.prefix+silosDir)
		var lease int64
		if ev.PrevKv != nil {
			lease, _ = strconv.ParseInt(string(ev.PrevKv.Value), 10, 64)
		}
		if name == s.cfg.Silo && lease == s.lease.Load() {
			return // our own, at Close (or lost: regrant says so)
		}
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			if err := s.reap(s.base, name, lease); err != nil {
				s.logger.Warn("a2a: failing the tasks of a departed silo", "silo", name, "err", err)
			}
		}()
	case strings.HasPrefix(key, s.prefix+cancelDir) && ev.Type == mvccpb.PUT && string(ev.Kv.Value) == s.cfg.Silo:
		id := spec.TaskID(strings.TrimPrefix(key, s.prefix+cancelDir))
		s.turns.cancel(id, errCancelRequested)
		ctx, cancel := context.WithTimeout(s.base, 10*time.Second)
		defer cancel()
		s.cli.Delete(ctx, key)
	}
}

// departedReason is the status message of a task whose silo went away.
func departedReason(silo string) string {
	return fmt.Sprintf("Unavailable: silo %s stopped while the task was being worked on; the turn's outcome is unknown", silo)
}

// reap fails the tasks marked active by silo under lease (0: any lease).
func (s *Server) reap(ctx context.Context, silo string, lease int64) error {
	_, err := s.eachActive(ctx, func(akey string, a activeRecord) bool {
		return a.Silo == silo && (lease == 0 || a.Lease == lease)
	}, departedReason)
	return err
}

// sweep fails the tasks marked active by a silo that holds no key with the
// marker's lease, and returns the revision it read at.
func (s *Server) sweep(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.prefix+silosDir, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	live := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		l, _ := strconv.ParseInt(string(kv.Value), 10, 64)
		live[strings.TrimPrefix(string(kv.Key), s.prefix+silosDir)] = l
	}
	_, err = s.eachActive(ctx, func(_ string, a activeRecord) bool {
		l, ok := live[a.Silo]
		return !ok || l != a.Lease
	}, departedReason)
	return resp.Header.Revision, err
}

// eachActive fails every task whose marker match selects, and returns how
// many it looked at.
func (s *Server) eachActive(ctx context.Context, match func(akey string, a activeRecord) bool, reason func(silo string) string) (int, error) {
	resp, err := s.cli.Get(ctx, s.prefix+activeDir, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kv := range resp.Kvs {
		var a activeRecord
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			s.logger.Warn("a2a: corrupt active marker", "key", string(kv.Key), "err", err)
			continue
		}
		if !match(string(kv.Key), a) {
			continue
		}
		n++
		if err := s.store.failActive(ctx, string(kv.Key), a, reason(a.Silo)); err != nil {
			return n, err
		}
		s.logger.Info("a2a: failed a task of a departed silo", "silo", a.Silo, "task", strings.TrimPrefix(string(kv.Key), s.prefix+activeDir))
	}
	return n, nil
}

// cancelTurn cancels the turn of task id: here, or on the silo its marker
// names, through a cancel key.
func (s *Server) cancelTurn(ctx context.Context, id spec.TaskID) {
	if s.turns.cancel(id, errCancelRequested) || !validID(string(id)) {
		return
	}
	resp, err := s.cli.Get(ctx, s.prefix+activeDir+string(id))
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	var a activeRecord
	if json.Unmarshal(resp.Kvs[0].Value, &a) != nil || a.Silo == s.cfg.Silo {
		return
	}
	lease, err := s.cli.Grant(ctx, cancelKeyTTL)
	if err != nil {
		s.logger.Warn("a2a: cancel request", "task", id, "err", err)
		return
	}
	if _, err := s.cli.Put(ctx, s.prefix+cancelDir+string(id), a.Silo, clientv3.WithLease(lease.ID)); err != nil {
		s.logger.Warn("a2a: cancel request", "task", id, "err", err)
	}
}
