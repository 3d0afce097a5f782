package directory_test

import (
	"context"
	"fmt"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/grain"
)

// A directory of one's own over the cluster's etcd (a silo makes one and
// serves it; see cluster.Silo.Directory): an outside A2A agent added by URL,
// then a search ranked by BM25.
func Example() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	cfg := directory.DefaultConfig()
	cfg.Client, cfg.Prefix = cli, "/agentsilo/"
	dir, err := directory.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := dir.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer dir.Close()
	if _, err := dir.Add(ctx, directory.Spec{Name: "weather", Kind: grain.KindA2A, URL: "https://weather.example.com"}); err != nil {
		log.Fatal(err)
	}
	hits, err := dir.Search(ctx, grain.DirectoryQuery{Text: "forecast for a city", Limit: 5})
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range hits {
		fmt.Printf("%s (%s) %.2f\n", h.Entry.Name, h.Entry.Kind, h.Score)
	}
}
