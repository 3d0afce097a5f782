package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// etcdServer is the program's own embedded etcd. It runs without fsync
// (what is measured is the silos, not the disk: registering a million
// reminders at the disk's fsync rate takes ten minutes) and accepts large
// transactions, for seeding.
type etcdServer struct {
	*etcdtest.Running
	client   *clientv3.Client
	endpoint string
}

func startEtcd(ctx context.Context, dir string) (*etcdServer, error) {
	r, err := etcdtest.Run(ctx, dir, func(cfg *embed.Config) {
		cfg.Name = "scale"
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		cfg.UnsafeNoFsync = true
		cfg.MaxTxnOps = 4096
		cfg.MaxRequestBytes = 16 << 20
		cfg.QuotaBackendBytes = 8 << 30
	})
	if err != nil {
		return nil, err
	}
	return &etcdServer{Running: r, client: r.Client(), endpoint: r.Endpoint()}, nil
}

// requestsByMethod is etcd's count of gRPC messages received (unary
// requests, and each message on a stream: lease keep-alives, watch
// creations) from its metrics endpoint, by method
// (LeaseKeepAlive, Range, Watch, ...).
func (e *etcdServer) requestsByMethod() (map[string]float64, error) {
	resp, err := http.Get(e.endpoint + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	const name = "grpc_server_msg_received_total{"
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		_, rest, ok := strings.Cut(line, `grpc_method="`)
		if !ok {
			continue
		}
		method, _, _ := strings.Cut(rest, `"`)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			out[method] += v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no metric %s", name)
	}
	return out, nil
}
