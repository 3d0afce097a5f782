// Command attack runs resource attacks against a real silo
// process, each against a fresh silo with API keys on, and prints the
// silo's resident memory (from /proc) as one JSON object per attack:
//
//   - slow-reader: one session sends 64 KiB Asks to Echo and never reads its
//     stream;
//   - sessions: one API key opens sessions as fast as it can and keeps them;
//   - no-hello: one API key opens session streams and never sends a Hello.
//
// While each attack runs, another principal makes unary Asks; other_ok
// counts those that succeeded. Run it against the silo of any revision to
// compare (Linux only, for /proc):
//
//	go run ./tests/attack                        # builds ./cmd/silo
//	go run ./tests/attack -silo /tmp/old/silo    # a silo built elsewhere
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

func main() {
	siloBin := flag.String("silo", "", "silo binary (default: build ./cmd/silo)")
	duration := flag.Duration("duration", 20*time.Second, "how long each attack runs")
	only := flag.String("attack", "", "run only this attack (slow-reader, sessions, no-hello)")
	flag.Parse()
	if err := run(*siloBin, *duration, *only); err != nil {
		fmt.Fprintln(os.Stderr, "attack:", err)
		os.Exit(1)
	}
}

// result is one attack's figures.
type result struct {
	Attack     string  `json:"attack"`
	Silo       string  `json:"silo"`
	Seconds    float64 `json:"seconds"`
	Accepted   int64   `json:"accepted"`
	Refused    int64   `json:"refused"`
	Refusal    string  `json:"refusal,omitempty"`
	RSSStart   float64 `json:"rss_start_mib"`
	RSSPeak    float64 `json:"rss_peak_mib"`
	RSSEnd     float64 `json:"rss_end_mib"`
	OtherOK    int64   `json:"other_ok"`
	OtherError int64   `json:"other_errors"`
}

func run(siloBin string, d time.Duration, only string) error {
	dir, err := os.MkdirTemp("", "attack")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if siloBin == "" {
		siloBin = filepath.Join(dir, "silo")
		cmd := exec.Command("go", "build", "-o", siloBin, "./cmd/silo")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build silo: %w", err)
		}
	}
	keys := filepath.Join(dir, "keys.json")
	hash := func(k string) string { h := sha256.Sum256([]byte(k)); return hex.EncodeToString(h[:]) }
	if err := os.WriteFile(keys, fmt.Appendf(nil, `{"keys": [{"sha256": %q, "principal": "mallory"}, {"sha256": %q, "principal": "bob"}]}`, hash("mallory-key"), hash("bob-key")), 0o600); err != nil {
		return err
	}
	attacks := []struct {
		name string
		f    func(ctx context.Context, conn *grpc.ClientConn, r *result)
	}{
		{"slow-reader", slowReader},
		{"sessions", sessions},
		{"no-hello", noHello},
	}
	for i, a := range attacks {
		if only != "" && a.name != only {
			continue
		}
		r, err := attack(siloBin, filepath.Join(dir, strconv.Itoa(i)), keys, d, a.name, a.f)
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	}
	return nil
}

// attack starts a silo, runs f against it for d while another principal
// calls it, and reports the silo's memory.
func attack(siloBin, dir, keys string, d time.Duration, name string, f func(context.Context, *grpc.ClientConn, *result)) (*result, error) {
	ports := make([]string, 5)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	gw := "127.0.0.1:" + ports[0]
	cmd := exec.Command(siloBin, "--examples", "--name", "attack", "--auth-file", keys, "--data-dir", filepath.Join(dir, "data"),
		"--gateway-addr", gw, "--peer-addr", "127.0.0.1:"+ports[1], "--gossip-addr", "127.0.0.1:"+ports[2],
		"--http-addr", "127.0.0.1:"+ports[3], "--embedded-etcd-addr", "127.0.0.1:"+ports[4], "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}()
	if err := waitReady("http://127.0.0.1:" + ports[3] + "/readyz"); err != nil {
		return nil, err
	}
	r := &result{Attack: name, Silo: siloBin, RSSStart: rss(cmd.Process.Pid, "VmRSS")}

	// Every attack connection is its own, as an attacker's would be.
	conn, err := grpc.NewClient(gw, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	other, err := grpc.NewClient(gw, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer other.Close()

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	start := time.Now()
	go func() {
		defer wg.Done()
		f(metadata.AppendToOutgoingContext(ctx, "x-api-key", "mallory-key"), conn, r)
	}()
	go func() {
		defer wg.Done()
		cli := agentsilov1.NewGatewayClient(other)
		bctx := metadata.AppendToOutgoingContext(ctx, "x-api-key", "bob-key")
		for ctx.Err() == nil {
			actx, acancel := context.WithTimeout(bctx, 2*time.Second)
			_, err := cli.Ask(actx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Echo:bob:e", Message: "hi"}})
			acancel()
			if err == nil {
				r.OtherOK++
			} else if ctx.Err() == nil {
				r.OtherError++
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// Sample the resident memory until the attack ends.
	tick := time.NewTicker(100 * time.Millisecond)
	for ctx.Err() == nil {
		r.RSSPeak = max(r.RSSPeak, rss(cmd.Process.Pid, "VmRSS"))
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	tick.Stop()
	r.RSSPeak = max(r.RSSPeak, rss(cmd.Process.Pid, "VmHWM"))
	r.RSSEnd = rss(cmd.Process.Pid, "VmRSS")
	r.Seconds = time.Since(start).Seconds()
	conn.Close()
	wg.Wait()
	return r, nil
}

// slowReader: one session sends 64 KiB Asks to Echo and never reads.
func slowReader(ctx context.Context, conn *grpc.ClientConn, r *result) {
	stream, err := agentsilov1.NewGatewayClient(conn).Session(ctx)
	if err != nil {
		r.Refusal = err.Error()
		return
	}
	if err := stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Hello{Hello: &agentsilov1.Hello{}}}); err != nil {
		r.Refusal = err.Error()
		return
	}
	payload := strings.Repeat("x", 64<<10)
	for id := uint64(1); ctx.Err() == nil; id++ {
		err := stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Call{Call: &agentsilov1.Call{
			CallId:  id,
			Message: &agentsilov1.AgentMessage{To: "Echo:e", Message: payload, Kind: agentsilov1.Kind_KIND_REQUEST},
		}}})
		if err != nil {
			// The stream ended: read what it says (the results first).
			for err == nil || err.Error() == "EOF" {
				_, err = stream.Recv()
			}
			r.Refused++
			r.Refusal = status.Code(err).String()
			return
		}
		r.Accepted++
	}
}

// sessions: one principal opens sessions as fast as it can, 64 at a time,
// and keeps them open.
func sessions(ctx context.Context, conn *grpc.ClientConn, r *result) {
	cli := agentsilov1.NewGatewayClient(conn)
	var accepted, refused atomic.Int64
	var refusal atomic.Value
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				stream, err := cli.Session(ctx)
				if err == nil {
					err = stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Hello{Hello: &agentsilov1.Hello{}}})
				}
				if err == nil {
					_, err = stream.Recv()
				}
				if err != nil {
					if ctx.Err() == nil {
						refused.Add(1)
						refusal.Store(status.Code(err).String())
					}
					continue
				}
				accepted.Add(1)
			}
		}()
	}
	wg.Wait()
	r.Accepted, r.Refused = accepted.Load(), refused.Load()
	if v, ok := refusal.Load().(string); ok {
		r.Refusal = v
	}
}

// noHello: one principal opens session streams and never says Hello.
func noHello(ctx context.Context, conn *grpc.ClientConn, r *result) {
	cli := agentsilov1.NewGatewayClient(conn)
	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	var refusal atomic.Value
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				stream, err := cli.Session(ctx)
				if err != nil {
					continue
				}
				accepted.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := stream.Recv(); err != nil && ctx.Err() == nil {
						refused.Add(1)
						refusal.Store(status.Code(err).String())
					}
				}()
			}
		}()
	}
	wg.Wait()
	r.Accepted, r.Refused = accepted.Load(), refused.Load()
	if v, ok := refusal.Load().(string); ok {
		r.Refusal = v
	}
}

// rss reads a memory figure of /proc/PID/status (VmRSS, VmHWM) in MiB.
func rss(pid int, field string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, p, err := net.SplitHostPort(l.Addr().String())
	return p, err
}

func waitReady(url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("silo not ready at %s", url)
}
