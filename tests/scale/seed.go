package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/reminders"
)

// The stored layout of a reminder (reminders/codec.go): the key
// <prefix>reminder-buckets/<bucket, 4 digits>/<Type:owner:alias>/<name>,
// the value JSON. seed writes it directly, in large transactions, instead
// of a Register per reminder (one etcd write each). The program checks it
// against the Service (List of a seeded reminder).
type record struct {
	PeriodMS  int64 `json:"period_ms"`
	DueUnixMS int64 `json:"due_unix_ms"`
}

func reminderKey(prefix string, addr grain.Address, name string) string {
	b := strings.TrimPrefix(reminders.BucketName(reminders.Bucket(addr)), "reminders/")
	return prefix + "reminder-buckets/" + b + "/" + addr.String() + "/" + name
}

// seedAddr is the address of the i-th seeded reminder's agent.
func seedAddr(i int) grain.Address {
	return grain.Address{Type: "Scale", Owner: "bench", Alias: fmt.Sprintf("a%d", i)}
}

// seed writes n reminders, the i-th of agent addr(i) first due at due(i)
// then every period, in transactions of batch puts, conc at a time. It
// returns the reminders per bucket.
func seed(ctx context.Context, cli *clientv3.Client, prefix string, n, batch, conc int, addr func(i int) grain.Address, due func(i int) time.Time, period time.Duration) ([]int, error) {
	per := make([]int, reminders.Buckets)
	for i := range n {
		per[reminders.Bucket(addr(i))]++
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, conc)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(int64(batch))) - batch
				if lo >= n {
					return
				}
				ops := make([]clientv3.Op, 0, batch)
				for i := lo; i < min(lo+batch, n); i++ {
					val, err := json.Marshal(record{PeriodMS: period.Milliseconds(), DueUnixMS: due(i).UnixMilli()})
					if err != nil {
						errc <- err
						return
					}
					ops = append(ops, clientv3.OpPut(reminderKey(prefix, addr(i), "r"), string(val)))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	return per, nil
}
