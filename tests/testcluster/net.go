package testcluster

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

// siloIP returns the loopback address of silo i: 127.0.0.<10+i> where this
// machine can bind it (Linux routes all of 127/8 to lo), else 127.0.0.1.
func siloIP(i int) string {
	if multiLoopback() && i < 240 {
		return fmt.Sprintf("127.0.0.%d", 10+i)
	}
	return "127.0.0.1"
}

var multiLoopbackOnce = sync.OnceValue(func() bool {
	l, err := net.Listen("tcp", "127.0.0.10:0")
	if err != nil {
		return false
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return false
	}
	c.Close()
	u, err := net.ListenPacket("udp", "127.0.0.10:0")
	if err != nil {
		return false
	}
	u.Close()
	return true
})

func multiLoopback() bool { return multiLoopbackOnce() }

// freeTCP returns ip:port with a TCP port that was free just now.
func freeTCP(ip string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return "", fmt.Errorf("testcluster: no free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// freeTCPUDP returns ip:port free for both TCP and UDP, as memberlist needs.
func freeTCPUDP(ip string) (string, error) {
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return "", fmt.Errorf("testcluster: no free port on %s: %w", ip, err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr, nil
		}
	}
	return "", fmt.Errorf("testcluster: no port on %s free for both TCP and UDP", ip)
}

// freeConsecutive returns ip:P with TCP ports P and P+1 both free, for an
// embedded etcd (clients on P, its raft peer listener on P+1).
func freeConsecutive(ip string) (string, error) {
	for range 50 {
		l1, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return "", fmt.Errorf("testcluster: no free port on %s: %w", ip, err)
		}
		port := l1.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port+1)))
		l1.Close()
		if err == nil {
			l2.Close()
			return net.JoinHostPort(ip, strconv.Itoa(port)), nil
		}
	}
	return "", fmt.Errorf("testcluster: no two consecutive free ports on %s", ip)
}
