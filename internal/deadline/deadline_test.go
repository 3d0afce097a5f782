package deadline

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSlotsShareAndExpire(t *testing.T) {
	var d Slots
	defer d.Close()
	now := time.Now().UnixNano()
	a, at := d.After(now + int64(20*time.Millisecond))
	b, _ := d.After(now + int64(20*time.Millisecond))
	if a != b {
		t.Fatal("two deadlines in one tick got different channels")
	}
	if at.UnixNano() < now+int64(20*time.Millisecond) || at.UnixNano()%Tick != 0 {
		t.Fatalf("rounded deadline %v is early or off the tick", at)
	}
	<-a
	if time.Now().Before(at) {
		t.Fatal("closed before its deadline")
	}
}

func TestContext(t *testing.T) {
	var d Slots
	defer d.Close()
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	ctx := d.Context(parent, time.Now().Add(15*time.Millisecond).UnixNano())
	if ctx.Value(key{}) != "v" {
		t.Fatal("values of the parent lost")
	}
	if _, ok := ctx.Deadline(); !ok || ctx.Err() != nil {
		t.Fatal("no deadline, or ended at once")
	}
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v", ctx.Err())
	}
}

func TestCloseExpiresAll(t *testing.T) {
	var d Slots
	ch, _ := d.After(time.Now().Add(time.Hour).UnixNano())
	d.Close()
	<-ch
	late, _ := d.After(time.Now().Add(time.Hour).UnixNano())
	<-late
}
