// Command statebench measures the agent state stores of package state on an
// embedded etcd and a local PostgreSQL server that it starts itself (fsync
// on in both), and prints one JSON object per line (the fields of
// `go run ./tests/reminderbench`):
//
//   - state-save, state-load: Save (with the etag of the previous save) and
//     Load per second, with latency percentiles, for each store (etcd,
//     postgres) and value size, from -c workers each on its own agent;
//   - raw-etcd-txn, raw-etcd-get: the same work as bare etcd client calls (a
//     put in a transaction conditioned on the mod revision, a get);
//   - raw-postgres-upsert, raw-postgres-select: the same as bare SQL (INSERT
//     ... ON CONFLICT DO UPDATE, SELECT by key) on a pool of the same size.
//
// Each store measurement and its raw twin run in -passes interleaved passes
// (raw first, then the store first, ...), so that a busy machine weighs on
// both alike; rate is the median pass's, latencies are over all passes.
// vs_raw on a store's row is its rate over the raw row's.
//
// Usage: go run ./tests/statebench [-n 2000] [-passes 3] [-c 16] [-sizes 1024,65536]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/pgtest"
	"github.com/agentsilo/agentsilo/state"
)

func main() {
	n := flag.Int("n", 2000, "operations per pass of a measurement")
	passes := flag.Int("passes", 3, "interleaved passes (raw, store) per measurement")
	conc := flag.Int("c", 16, "concurrent workers (and PostgreSQL connections)")
	sizes := flag.String("sizes", "1024,65536", "value sizes in bytes, comma-separated")
	flag.Parse()
	var sz []int
	for _, f := range strings.Split(*sizes, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 || v > state.MaxEtcdState {
			fmt.Fprintf(os.Stderr, "error: bad size %q (0 to %d)\n", f, state.MaxEtcdState)
			os.Exit(2)
		}
		sz = append(sz, v)
	}
	if *n < 1 || *conc < 1 || *passes < 1 {
		fmt.Fprintln(os.Stderr, "error: -n, -c and -passes must be positive")
		os.Exit(2)
	}
	if err := run(*n, *conc, *passes, sz); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

type row struct {
	Bench  string  `json:"bench"`
	Store  string  `json:"store,omitempty"`
	Size   int     `json:"size"`
	N      int     `json:"n"`
	C      int     `json:"c"`
	Rate   float64 `json:"rate"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	P999us float64 `json:"p999_us"`
	MeanUs float64 `json:"mean_us"`
	VsRaw  float64 `json:"vs_raw,omitempty"`
	Note   string  `json:"note,omitempty"`
}

func emit(r row) {
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func run(n, conc, passes int, sizes []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "statebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o711); err != nil { // the postgres user reaches its directory below
		return err
	}

	etcd, err := etcdtest.Run(ctx, filepath.Join(dir, "etcd"))
	if err != nil {
		return err
	}
	defer etcd.Close()
	pg, err := pgtest.Run(ctx, pgtest.Config{Dir: filepath.Join(dir, "pg"), Fsync: true})
	if err != nil {
		return err
	}
	defer pg.Close()
	url := pg.URL() + "&pool_max_conns=" + strconv.Itoa(conc)

	cli := etcd.Client()
	es, err := state.Open(ctx, "etcd", cli, "/bench/")
	if err != nil {
		return err
	}
	ps, err := state.Open(ctx, url, nil, "")
	if err != nil {
		return err
	}
	defer ps.Close()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE raw_state (k text PRIMARY KEY, v bytea NOT NULL)`); err != nil {
		return err
	}

	for _, size := range sizes {
		value := make([]byte, size)
		for i := range value {
			value[i] = byte('a' + i%26)
		}
		rawKey := func(w int) string { return fmt.Sprintf("/bench/raw/%d/%d", size, w) }
		revs := make([]int64, conc)
		etcdEtags := make([]string, conc)
		pgEtags := make([]string, conc)
		pairs := []pair{
			{bench: "state-save", store: "etcd", raw: "raw-etcd-txn",
				rawOp: func(ctx context.Context, w int) error {
					k := rawKey(w)
					resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", revs[w])).Then(clientv3.OpPut(k, string(value))).Commit()
					if err == nil && !resp.Succeeded {
						err = fmt.Errorf("raw txn on %s lost its revision", k)
					}
					if err == nil {
						revs[w] = resp.Header.Revision
					}
					return err
				},
				storeOp: saveOp(es, size, value, etcdEtags)},
			{bench: "state-load", store: "etcd", raw: "raw-etcd-get",
				rawOp: func(ctx context.Context, w int) error {
					_, err := cli.Get(ctx, rawKey(w))
					return err
				},
				storeOp: loadOp(es, size)},
			{bench: "state-save", store: "postgres", raw: "raw-postgres-upsert",
				rawOp: func(ctx context.Context, w int) error {
					_, err := pool.Exec(ctx, `INSERT INTO raw_state (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v`, rawKey(w), value)
					return err
				},
				storeOp: saveOp(ps, size, value, pgEtags)},
			{bench: "state-load", store: "postgres", raw: "raw-postgres-select",
				rawOp: func(ctx context.Context, w int) error {
					var v []byte
					return pool.QueryRow(ctx, `SELECT v FROM raw_state WHERE k = $1`, rawKey(w)).Scan(&v)
				},
				storeOp: loadOp(ps, size)},
		}
		note := fmt.Sprintf("%d workers, one agent each, fsync on; rate: median of %d interleaved passes", conc, passes)
		for _, p := range pairs {
			var raws, stores []result
			for i := range passes {
				order := []bool{false, true} // raw first on even passes, the store first on odd ones
				if i%2 == 1 {
					order = []bool{true, false}
				}
				for _, isStore := range order {
					op, name := p.rawOp, p.raw
					if isStore {
						op, name = p.storeOp, p.store+" "+p.bench
					}
					r, err := measure(ctx, n, conc, op)
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					if isStore {
						stores = append(stores, r)
					} else {
						raws = append(raws, r)
					}
				}
			}
			raw := merge(raws)
			emit(raw.row(p.raw, "", size, note, 0))
			emit(merge(stores).row(p.bench, p.store, size, note, raw.rate))
		}
	}
	return nil
}

// pair is a store operation and the raw client call it is compared with.
type pair struct {
	bench, store, raw string
	rawOp, storeOp    func(ctx context.Context, w int) error
}

func agent(size, w int) grain.Address {
	return grain.Address{Type: "Bench", Owner: "bench", Alias: fmt.Sprintf("s%d-w%d", size, w)}
}

// saveOp saves value on st, each worker chaining the etags of its agent.
func saveOp(st grain.StateStore, size int, value []byte, etags []string) func(ctx context.Context, w int) error {
	return func(ctx context.Context, w int) error {
		e, err := st.Save(ctx, agent(size, w), value, etags[w])
		if err == nil {
			etags[w] = e
		}
		return err
	}
}

func loadOp(st grain.StateStore, size int) func(ctx context.Context, w int) error {
	return func(ctx context.Context, w int) error {
		data, _, err := st.Load(ctx, agent(size, w))
		if err == nil && len(data) != size {
			err = fmt.Errorf("loaded %d bytes, want %d", len(data), size)
		}
		return err
	}
}

// merge pools the latencies of several passes; its rate is their median.
func merge(rs []result) result {
	out := result{conc: rs[0].conc}
	rates := make([]float64, 0, len(rs))
	for _, r := range rs {
		out.lat = append(out.lat, r.lat...)
		rates = append(rates, r.rate)
	}
	slices.Sort(rates)
	out.rate = rates[len(rates)/2]
	return out
}

type result struct {
	lat  []time.Duration
	rate float64
	conc int
}

// measure runs op n times from conc workers (worker w calls op(ctx, w) one
// call at a time) after one unmeasured call per worker, and returns each
// call's latency.
func measure(ctx context.Context, n, conc int, op func(ctx context.Context, w int) error) (result, error) {
	for w := range conc {
		if err := op(ctx, w); err != nil {
			return result{}, err
		}
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
		lat      = make([][]time.Duration, conc)
	)
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && firstErr.Load() == nil {
				t0 := time.Now()
				if err := op(ctx, w); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		return result{}, *err
	}
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	return result{lat: all, rate: float64(len(all)) / elapsed.Seconds(), conc: conc}, nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func (r result) row(bench, store string, size int, note string, rawRate float64) row {
	lat := slices.Clone(r.lat)
	slices.Sort(lat)
	q := func(p float64) float64 { return us(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	out := row{Bench: bench, Store: store, Size: size, N: len(lat), C: r.conc, Rate: r.rate,
		P50us: q(0.50), P99us: q(0.99), P999us: q(0.999), MeanUs: us(sum / time.Duration(len(lat))), Note: note}
	if rawRate > 0 {
		out.VsRaw = r.rate / rawRate
	}
	return out
}
