package auditstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// etcdOpTimeout bounds each etcd request.
const etcdOpTimeout = 5 * time.Second

// maxEtcdBatch bounds the records of one etcd transaction: three
// operations each, and the head, within etcd's default --max-txn-ops
// (128).
const maxEtcdBatch = 40

// Etcd is the store in etcd, under <prefix>audit/:
//
//	head/<partition>          the partition's audit.Head, JSON
//	rec/<partition>/<seq>     a record, JSON (seq in 20 digits)
//	key/<sha256 of its key>   <partition>/<seq> of the record of that key
//
// An append is one transaction: if the head's mod revision is the one
// read and no key of its records exists, it puts the records, their keys
// and the new head; else it reads them again and retries without the
// records whose keys exist.
type Etcd struct {
	client *clientv3.Client
	root   string

	mu    sync.Mutex
	heads map[string]etcdHead // the last head seen per partition
}

type etcdHead struct {
	h   audit.Head
	rev int64 // its mod revision; 0: the key does not exist
}

// NewEtcd returns the store on client under prefix (default
// "/agentsilo/"). Close does not close the client.
func NewEtcd(client *clientv3.Client, prefix string) *Etcd {
	if prefix == "" {
		prefix = "/agentsilo/"
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Etcd{client: client, root: prefix + "audit/", heads: map[string]etcdHead{}}
}

func (s *Etcd) headKey(p string) string { return s.root + "head/" + p }
func (s *Etcd) recPrefix(p string) string {
	return s.root + "rec/" + p + "/"
}
func (s *Etcd) recKey(p string, seq uint64) string {
	return fmt.Sprintf("%s%020d", s.recPrefix(p), seq)
}
func (s *Etcd) keyKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return s.root + "key/" + hex.EncodeToString(h[:])
}

// RecordKey returns the etcd key of partition's record seq (for tests that
// change a record behind the log's back).
func (s *Etcd) RecordKey(partition string, seq uint64) string { return s.recKey(partition, seq) }

func (s *Etcd) head(ctx context.Context, p string) (etcdHead, error) {
	s.mu.Lock()
	h, ok := s.heads[p]
	s.mu.Unlock()
	if ok {
		return h, nil
	}
	octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := s.client.Get(octx, s.headKey(p))
	if err != nil {
		return etcdHead{}, etcderr.FromCall(ctx, err, "audit: read the head of partition %s", p)
	}
	return s.keep(p, resp.Kvs)
}

// keep records the head read in kvs (none: the partition is empty).
func (s *Etcd) keep(p string, kvs []*mvccpb.KeyValue) (etcdHead, error) {
	h := etcdHead{h: audit.Head{Partition: p}}
	if len(kvs) > 0 {
		if err := json.Unmarshal(kvs[0].Value, &h.h); err != nil {
			return etcdHead{}, errs.Wrap(codes.DataLoss, err, "audit: the head of partition %s is not JSON", p)
		}
		h.rev = kvs[0].ModRevision
	}
	s.mu.Lock()
	if cur, ok := s.heads[p]; !ok || cur.rev <= h.rev {
		s.heads[p] = h
	}
	s.mu.Unlock()
	return h, nil
}

// Append implements Store.
func (s *Etcd) Append(ctx context.Context, p string, recs []audit.Record) ([]audit.Record, error) {
	var out []audit.Record
	for len(recs) > 0 {
		n := min(len(recs), maxEtcdBatch)
		w, err := s.append(ctx, p, recs[:n])
		out = append(out, w...)
		if err != nil {
			return out, err
		}
		recs = recs[n:]
	}
	return out, nil
}

func (s *Etcd) append(ctx context.Context, p string, in []audit.Record) ([]audit.Record, error) {
	recs := append([]audit.Record(nil), in...)
	for attempt := 0; len(recs) > 0; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, errs.Wrap(codes.DeadlineExceeded, err, "audit: append to partition %s: may have run", p)
		}
		h, err := s.head(ctx, p)
		if err != nil {
			return nil, err
		}
		audit.Link(h.h, recs)
		last := recs[len(recs)-1]
		next := h.h
		next.Seq, next.Hash = last.Seq, last.Hash
		hv, err := json.Marshal(next)
		if err != nil {
			return nil, errs.Wrap(codes.Internal, err, "audit: encode a head")
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.headKey(p)), "=", h.rev)}
		ops := []clientv3.Op{clientv3.OpPut(s.headKey(p), string(hv))}
		orElse := []clientv3.Op{clientv3.OpGet(s.headKey(p))}
		for _, r := range recs {
			v, err := json.Marshal(r)
			if err != nil {
				return nil, errs.Wrap(codes.Internal, err, "audit: encode a record")
			}
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.keyKey(r.Key)), "=", 0))
			ops = append(ops, clientv3.OpPut(s.recKey(p, r.Seq), string(v)), clientv3.OpPut(s.keyKey(r.Key), p+"/"+strconv.FormatUint(r.Seq, 10)))
			orElse = append(orElse, clientv3.OpGet(s.keyKey(r.Key), clientv3.WithKeysOnly()))
		}
		octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
		resp, err := s.client.Txn(octx).If(cmps...).Then(ops...).Else(orElse...).Commit()
		cancel()
		if err != nil {
			// Unknown whether it was written: forget the head, and the
			// keys tell on the next attempt.
			s.mu.Lock()
			delete(s.heads, p)
			s.mu.Unlock()
			return nil, etcderr.FromCall(ctx, err, "audit: append to partition %s (may have run)", p)
		}
		if resp.Succeeded {
			s.mu.Lock()
			if cur, ok := s.heads[p]; !ok || cur.rev < resp.Header.Revision {
				s.heads[p] = etcdHead{h: next, rev: resp.Header.Revision}
			}
			s.mu.Unlock()
			return recs, nil
		}
		if _, err := s.keep(p, resp.Responses[0].GetResponseRange().Kvs); err != nil {
			return nil, err
		}
		// Drop the records whose keys are recorded.
		kept := recs[:0]
		for i, r := range recs {
			if len(resp.Responses[i+1].GetResponseRange().Kvs) == 0 {
				kept = append(kept, r)
			}
		}
		recs = kept
	}
	return nil, nil
}

// Client returns the etcd client the store writes with.
func (s *Etcd) Client() *clientv3.Client { return s.client }

// Staged is a record to be written in an etcd transaction of the caller's,
// beside the caller's own write (an A2A task's end and its record, in one
// transaction): Op is a nested transaction that appends it to its
// partition's chain if the head is still the one Stage read and no record
// of its key exists, and else does nothing. Once the transaction is
// committed, Settle says whether Op wrote it; if not, append it with the
// log (the same key: written at most once).
type Staged struct {
	Op   clientv3.Op
	s    *Etcd
	p    string
	next audit.Head
}

// Stage prepares the append of r (audit.Log.Prepare's) to partition p,
// after the head as this store last saw it (read from etcd if it has not).
func (s *Etcd) Stage(ctx context.Context, p string, r audit.Record) (*Staged, error) {
	h, err := s.head(ctx, p)
	if err != nil {
		return nil, err
	}
	recs := []audit.Record{r}
	audit.Link(h.h, recs)
	next := h.h
	next.Seq, next.Hash = recs[0].Seq, recs[0].Hash
	hv, err := json.Marshal(next)
	if err != nil {
		return nil, errs.Wrap(codes.Internal, err, "audit: encode a head")
	}
	v, err := json.Marshal(recs[0])
	if err != nil {
		return nil, errs.Wrap(codes.Internal, err, "audit: encode a record")
	}
	op := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.headKey(p)), "=", h.rev), clientv3.Compare(clientv3.CreateRevision(s.keyKey(r.Key)), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(s.headKey(p), string(hv)), clientv3.OpPut(s.recKey(p, recs[0].Seq), string(v)), clientv3.OpPut(s.keyKey(r.Key), p+"/"+strconv.FormatUint(recs[0].Seq, 10))},
		nil)
	return &Staged{Op: op, s: s, p: p, next: next}, nil
}

// Settle takes the outcome of the transaction that held st.Op: committed
// says it was committed at revision rev, and resp is Op's response in it
// (nil if the caller's own condition failed, so Op did not run). It
// reports whether the record was written.
func (st *Staged) Settle(committed bool, rev int64, resp *pb.ResponseOp) bool {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if committed && resp != nil && resp.GetResponseTxn().GetSucceeded() {
		if cur, ok := s.heads[st.p]; !ok || cur.rev < rev {
			s.heads[st.p] = etcdHead{h: st.next, rev: rev}
		}
		return true
	}
	// The head moved (or the outcome is unknown): read it again next time.
	delete(s.heads, st.p)
	return false
}

// Heads implements Store.
func (s *Etcd) Heads(ctx context.Context) ([]audit.Head, error) {
	octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := s.client.Get(octx, s.root+"head/", clientv3.WithPrefix())
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "audit: read the heads")
	}
	var out []audit.Head
	for _, kv := range resp.Kvs {
		var h audit.Head
		if err := json.Unmarshal(kv.Value, &h); err != nil {
			return nil, errs.Wrap(codes.DataLoss, err, "audit: the head %s is not JSON", kv.Key)
		}
		out = append(out, h)
	}
	return out, nil
}

// Scan implements Store.
func (s *Etcd) Scan(ctx context.Context, p string, after uint64, limit int) ([]audit.Record, error) {
	octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	from := s.recKey(p, after+1)
	resp, err := s.client.Get(octx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.recPrefix(p))), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "audit: read partition %s", p)
	}
	out := make([]audit.Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r audit.Record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			// A record that does not decode is kept as one that does not
			// match, for Verify to name.
			seq, _ := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), s.recPrefix(p)), 10, 64)
			r = audit.Record{Partition: p, Seq: seq, Detail: "undecodable: " + clip(err.Error(), 200)}
		}
		out = append(out, r)
	}
	return out, nil
}

// Sweep implements Store.
func (s *Etcd) Sweep(ctx context.Context, p string, before time.Time, max int) (int, error) {
	removed := 0
	for removed < max {
		h, err := s.head(ctx, p)
		if err != nil {
			return removed, err
		}
		recs, err := s.Scan(ctx, p, h.h.AnchorSeq, min(maxEtcdBatch, max-removed))
		if err != nil {
			return removed, err
		}
		n := 0
		for n < len(recs) && recs[n].Time.Before(before) && recs[n].Seq <= h.h.Seq {
			n++
		}
		if n == 0 {
			return removed, nil
		}
		next := h.h
		next.AnchorSeq, next.AnchorHash = recs[n-1].Seq, recs[n-1].Hash
		hv, err := json.Marshal(next)
		if err != nil {
			return removed, errs.Wrap(codes.Internal, err, "audit: encode a head")
		}
		ops := []clientv3.Op{clientv3.OpPut(s.headKey(p), string(hv))}
		for _, r := range recs[:n] {
			ops = append(ops, clientv3.OpDelete(s.recKey(p, r.Seq)))
			if r.Key != "" {
				ops = append(ops, clientv3.OpDelete(s.keyKey(r.Key)))
			}
		}
		octx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
		resp, err := s.client.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(s.headKey(p)), "=", h.rev)).Then(ops...).Else(clientv3.OpGet(s.headKey(p))).Commit()
		cancel()
		if err != nil {
			s.mu.Lock()
			delete(s.heads, p)
			s.mu.Unlock()
			return removed, etcderr.FromCall(ctx, err, "audit: sweep partition %s", p)
		}
		if !resp.Succeeded {
			if _, err := s.keep(p, resp.Responses[0].GetResponseRange().Kvs); err != nil {
				return removed, err
			}
			continue
		}
		s.mu.Lock()
		s.heads[p] = etcdHead{h: next, rev: resp.Header.Revision}
		s.mu.Unlock()
		removed += n
	}
	return removed, nil
}

// Close implements Store; the client stays open.
func (s *Etcd) Close() error { return nil }
