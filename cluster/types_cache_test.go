package cluster

import (
	"context"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/grain"
)

// The directory's types (directoryTypes): each other silo is asked once
// for its incarnation, and its answer used while fresh (a cancelled call
// then still lists them, asking no one); a silo that leaves the view takes
// its types with it, and one that joins is asked for its own.
func TestDirectoryTypesAskEachSiloOnce(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	with := func(typ string) func(*SiloConfig, *grain.Registry) {
		return func(_ *SiloConfig, reg *grain.Registry) {
			if err := reg.Register(typ, func(grain.Host) (grain.Agent, error) { return nil, nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	s1 := c.start("s1")
	c.startWith("s2", with("OnlyS2"))
	c.waitView("s1", "s2")
	info := clusterInfo{r: s1.router, rt: s1.rt}
	var cache peerTypes
	names := func(ctx context.Context) ([]string, error) {
		t.Helper()
		types, err := info.directoryTypes(ctx, &cache)
		var out []string
		for _, ty := range types {
			out = append(out, ty.GetName())
		}
		return out, err
	}
	has := func(got []string, typ string) bool { return slices.Contains(got, typ) }
	got, err := names(t.Context())
	if err != nil || !has(got, "OnlyS2") || !has(got, "Probe") {
		t.Fatalf("types %v, %v; want s2's OnlyS2 and Probe", got, err)
	}
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if got, err := names(done); err != nil || !has(got, "OnlyS2") {
		t.Fatalf("types again, cancelled: %v, %v; want s2's from the cache, no one asked", got, err)
	}
	// A new silo is asked (the cancelled call fails for it alone).
	c.startWith("s3", with("OnlyS3"))
	c.waitView("s1", "s2", "s3")
	if got, err := names(done); err == nil || has(got, "OnlyS3") || !has(got, "OnlyS2") {
		t.Fatalf("types with s3 new, cancelled: %v, %v; want s3 asked (an error) and s2's from the cache", got, err)
	}
	if got, err := names(t.Context()); err != nil || !has(got, "OnlyS3") {
		t.Fatalf("types with s3: %v, %v; want OnlyS3", got, err)
	}
	c.stop("s2")
	c.waitView("s1", "s3")
	if got, err := names(done); err != nil || has(got, "OnlyS2") || !has(got, "OnlyS3") {
		t.Fatalf("types after s2 left: %v, %v; want OnlyS3, not OnlyS2", got, err)
	}
}
