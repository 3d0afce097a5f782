package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdServer is the program's own embedded etcd. It runs without fsync
// (what is measured is the silos, not the disk: registering a million
// reminders at the disk's fsync rate takes ten minutes) and accepts large
// transactions, for seeding.
type etcdServer struct {
	srv      *embed.Etcd
	client   *clientv3.Client
	endpoint string
}

func startEtcd(ctx context.Context, dir string) (*etcdServer, error) {
	var addrs [2]string
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[i] = l.Addr().String()
		l.Close()
	}
	cfg := embed.NewConfig()
	cfg.Name = "scale"
	cfg.Dir = dir
	cu := url.URL{Scheme: "http", Host: addrs[0]}
	pu := url.URL{Scheme: "http", Host: addrs[1]}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	cfg.MaxTxnOps = 4096
	cfg.MaxRequestBytes = 16 << 20
	cfg.QuotaBackendBytes = 8 << 30
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		srv.Close()
		return nil, fmt.Errorf("etcd failed: %w", err)
	case <-ctx.Done():
		srv.Close()
		return nil, ctx.Err()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu.String()}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), MaxCallSendMsgSize: 32 << 20})
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &etcdServer{srv: srv, client: cli, endpoint: cu.String()}, nil
}

func (e *etcdServer) Close() {
	e.client.Close()
	e.srv.Close()
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
