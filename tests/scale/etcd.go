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

// requests reads etcd's count of gRPC messages received (unary requests,
// and each message on a stream: lease keep-alives, watch creations) from
// its metrics endpoint.
func (e *etcdServer) requests() (float64, error) {
	resp, err := http.Get(e.endpoint + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return sumMetric(resp, "grpc_server_msg_received_total")
}

// sumMetric sums every sample of the counter or gauge name in a
// Prometheus text exposition.
func sumMetric(resp *http.Response, name string) (float64, error) {
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("no metric %s", name)
	}
	return sum, nil
}
