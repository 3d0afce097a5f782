package testcluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
)

// KeyedCounter increments one demo Counter agent, key after key, each
// increment under an idempotency key of its own, and checks that each key
// is applied exactly once. A failed attempt is asked again with the same
// key until it is answered OK or AlreadyExists (applied already), as a
// careful caller would; then the next key is taken. An OK reply must be the
// count of keys answered so far (a reply above is a double: some key was
// applied twice; below, a loss), and once the load is over the counter must
// hold exactly that count (Check).
//
// Run and Check are called from one goroutine at a time; Result may be
// called once Run has returned.
type KeyedCounter struct {
	addr, key string

	mu      sync.Mutex
	applied int64 // the count the keys answered so far should have made
	res     KeyedResult
	pending string // the key in flight when Run stopped, or ""
	history []string
}

// KeyedResult is what a KeyedCounter found.
type KeyedResult struct {
	Addr    string
	Keys    int64   // keys answered
	Doubles int64   // increments applied twice
	Lost    int64   // increments lost
	Failed  []error // attempts that failed (each asked again with its key)
	Report  []string
}

// NewKeyedCounter returns a KeyedCounter of Counter agent addr whose keys
// are prefix-0, prefix-1, ...
func NewKeyedCounter(addr, prefix string) *KeyedCounter {
	return &KeyedCounter{addr: addr, key: prefix, res: KeyedResult{Addr: addr}}
}

// Run takes key after key through cl until ctx ends, each attempt bounded
// by timeout.
func (k *KeyedCounter) Run(ctx context.Context, cl *client.Client, timeout time.Duration) {
	for n := 0; ctx.Err() == nil; n++ {
		key := fmt.Sprintf("%s-%d", k.key, n)
		for ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			r, err := cl.Ask(cctx, k.addr, &client.Message{Message: "inc", IdempotencyKey: key})
			cancel()
			if ctx.Err() != nil {
				k.mu.Lock()
				k.pending = key
				k.mu.Unlock()
				return
			}
			if k.answer(key, r, err) {
				break
			}
			pauseCtx(ctx, 20*time.Millisecond)
		}
	}
}

// answer checks one attempt's outcome; it reports whether key is answered.
func (k *KeyedCounter) answer(key string, r *client.Message, err error) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case err == nil:
		v, perr := strconv.ParseInt(r.Message, 10, 64)
		if perr != nil {
			k.brokeLocked("key %s: reply %q is no count", key, r.Message)
			k.res.Lost++
			return true
		}
		want := k.applied + 1
		k.noteLocked("%s OK %d", key, v)
		switch {
		case v > want:
			k.res.Doubles += v - want
			k.brokeLocked("key %s answered %d where %d was due: %d applied twice", key, v, want, v-want)
		case v < want:
			k.res.Lost += want - v
			k.brokeLocked("key %s answered %d where %d was due: %d lost", key, v, want, want-v)
		}
		k.applied = v
	case errs.Code(err) == codes.AlreadyExists:
		k.noteLocked("%s AlreadyExists", key)
		k.applied++
	default:
		k.noteLocked("%s %v", key, errs.Code(err))
		if len(k.res.Failed) < 10000 {
			k.res.Failed = append(k.res.Failed, err)
		}
		return false
	}
	k.res.Keys++
	return true
}

// Check, once the load and the faults are over, asks again the key that
// was in flight when Run stopped (with its key, as its caller would), then
// reads the counter: it must hold exactly the count its keys made.
func (k *KeyedCounter) Check(tb TB, cl *client.Client) {
	tb.Helper()
	retry := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(tb.Context(), time.Minute)
		defer cancel()
		for {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			err := f(cctx)
			ccancel()
			if err == nil || ctx.Err() != nil {
				return err
			}
			pauseCtx(ctx, 200*time.Millisecond)
		}
	}
	k.mu.Lock()
	pending := k.pending
	k.mu.Unlock()
	if pending != "" {
		err := retry(func(ctx context.Context) error {
			r, err := cl.Ask(ctx, k.addr, &client.Message{Message: "inc", IdempotencyKey: pending})
			if k.answer(pending, r, err) {
				return nil
			}
			return err
		})
		if err != nil {
			k.mu.Lock()
			k.brokeLocked("key %s: no answer after the faults: %v", pending, err)
			k.mu.Unlock()
		}
	}
	var got int64
	err := retry(func(ctx context.Context) error {
		r, err := cl.Ask(ctx, k.addr, &client.Message{Message: "get"})
		if err != nil {
			return err
		}
		got, err = strconv.ParseInt(r.Message, 10, 64)
		return err
	})
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case err != nil:
		k.brokeLocked("cannot read the count: %v", err)
		k.res.Lost++
	case got > k.applied:
		k.res.Doubles += got - k.applied
		k.brokeLocked("holds %d after %d keys answered (count due %d): %d applied twice", got, k.res.Keys, k.applied, got-k.applied)
	case got < k.applied:
		k.res.Lost += k.applied - got
		k.brokeLocked("holds %d after %d keys answered (count due %d): %d lost", got, k.res.Keys, k.applied, k.applied-got)
	}
}

// Keys returns the number of keys answered so far.
func (k *KeyedCounter) Keys() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.res.Keys
}

// Failures returns the number of attempts that failed so far.
func (k *KeyedCounter) Failures() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.res.Failed)
}

// Result returns what k found.
func (k *KeyedCounter) Result() KeyedResult {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.res
	r.Failed = append([]error(nil), r.Failed...)
	r.Report = append([]string(nil), r.Report...)
	return r
}

// noteLocked keeps the last outcomes, for the report of a broken invariant.
func (k *KeyedCounter) noteLocked(format string, args ...any) {
	if len(k.history) == 12 {
		k.history = append(k.history[:0], k.history[1:]...)
	}
	k.history = append(k.history, fmt.Sprintf(format, args...))
}

func (k *KeyedCounter) brokeLocked(format string, args ...any) {
	if len(k.res.Report) < 10 {
		k.res.Report = append(k.res.Report, k.addr+": "+fmt.Sprintf(format, args...)+"; history: "+strings.Join(k.history, " | "))
	}
}

// pauseCtx waits d or until ctx ends.
func pauseCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
