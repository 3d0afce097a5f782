// Package pgtest runs a throwaway PostgreSQL server from the machine's
// PostgreSQL binaries (Debian's postgresql package), for tests (Start) and
// benchmark programs (Run). The server listens on 127.0.0.1 on a free port,
// with its Unix socket in its own directory, and trusts local connections as
// the superuser postgres.
//
//	url := pgtest.Start(t) // postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
//	pool, err := pgxpool.New(t.Context(), url)
//
// PostgreSQL refuses to run as root: as root, pgtest runs initdb and the
// server as the postgres user the Debian package creates, and gives it the
// data directory.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// Install is what to do when the binaries are missing.
const Install = "install PostgreSQL: apt-get update && apt-get install -y --no-install-recommends postgresql"

// Config configures Run.
type Config struct {
	// Dir holds the data directory, the socket and the server's log. It is
	// created if missing and given to the postgres user when running as
	// root; everything above it must be searchable by that user. Required.
	Dir string
	// Fsync makes the server flush its writes to disk (fsync and
	// synchronous_commit on), as a production server does: for benchmarks.
	// Off (the default), a test's commits are not durable but fast.
	Fsync bool
}

// Server is a running PostgreSQL server.
type Server struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
	waitErr error         // cmd.Wait's, once exited is closed
	logPath string
	url     string
	sockDir string // removed at Close if set (a short path outside Dir)
}

// debianBins is where Debian's postgresql packages put the server binaries.
var debianBins = "/usr/lib/postgresql/*/bin"

// BinDir returns the directory of the PostgreSQL server binaries (initdb and
// postgres): the newest /usr/lib/postgresql/<version>/bin, else the directory
// of initdb found on PATH.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob(debianBins)
	version := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil && isExec(filepath.Join(filepath.Dir(p), "postgres")) {
			return filepath.Dir(p), nil
		}
	}
	return "", fmt.Errorf("pgtest: no PostgreSQL server binaries (initdb, postgres) in /usr/lib/postgresql/*/bin or on PATH: %s", Install)
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Run initializes a database cluster in cfg.Dir, starts a server on it and
// waits, bounded by ctx, until it accepts connections. Close stops it.
func Run(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgtest: Config.Dir is empty")
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	s := &Server{exited: make(chan struct{}), logPath: filepath.Join(dir, "postgres.log")}
	sockDir := dir
	if len(sockDir)+len("/.s.PGSQL.65535") > 100 { // sun_path holds 107 bytes
		if sockDir, err = os.MkdirTemp("", "pgtest"); err != nil {
			return nil, err
		}
		s.sockDir = sockDir
	}
	for _, d := range []string{dir, sockDir} {
		if err := own(d, cred); err != nil {
			s.cleanup()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Env = env()
	if out, err := initdb.CombinedOutput(); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("pgtest: initdb in %s: %w\n%s", data, err, out)
	}

	port, err := freePort()
	if err != nil {
		s.cleanup()
		return nil, err
	}
	durable := "off"
	if cfg.Fsync {
		durable = "on"
	}
	logf, err := os.Create(s.logPath)
	if err != nil {
		s.cleanup()
		return nil, err
	}
	defer logf.Close() // the server has its own descriptor
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+sockDir,
		"-c", "fsync="+durable, "-c", "synchronous_commit="+durable, "-c", "full_page_writes="+durable,
		"-c", "logging_collector=off", "-c", "max_connections=200")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	s.cmd.Env = env()
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("pgtest: start postgres: %w", err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	s.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := s.waitReady(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// waitReady polls until a connection pings, the server exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := s.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("pgtest: postgres exited before accepting connections: %w\n%s", s.waitErr, s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("pgtest: waiting for postgres to accept connections: %w (last: %w)\n%s", ctx.Err(), err, s.logTail())
		case <-tick.C:
		}
	}
}

func (s *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// URL returns the connection URL: the superuser postgres, database postgres,
// over TCP to 127.0.0.1.
func (s *Server) URL() string { return s.url }

// Close stops the server (a fast shutdown: sessions are ended, then a
// checkpoint) and waits for it, killing it if it takes over a minute. The
// data directory stays.
func (s *Server) Close() error {
	defer s.cleanup()
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case <-s.exited:
		return nil
	case <-t.C:
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		return fmt.Errorf("pgtest: postgres did not stop within a minute; killed\n%s", s.logTail())
	}
}

func (s *Server) cleanup() {
	if s.sockDir != "" {
		os.RemoveAll(s.sockDir)
	}
}

// logTail returns the end of the server's log, for errors.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// credential returns the postgres user's when running as root, else nil.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs the postgres user to run the server as (%w): %s", err, Install)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// own gives dir to cred's user, if any.
func own(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return os.Chmod(dir, 0o700)
}

// env is the environment of initdb and postgres: the caller's, without
// PostgreSQL's own variables, in the C locale.
func env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if len(kv) >= 2 && kv[:2] == "PG" || len(kv) > 3 && kv[:3] == "LC_" || len(kv) > 5 && kv[:5] == "LANG=" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LC_ALL=C")
}

// Start runs a server in a temporary directory of t for the rest of the test
// and returns its URL; the server is stopped at cleanup. Without the
// PostgreSQL binaries the test skips (fails under CI: testutil.Need),
// saying what to install; it fails if the server does not accept
// connections within two minutes.
func Start(t testing.TB) string {
	t.Helper()
	_, err := BinDir()
	testutil.Need(t, err == nil, "PostgreSQL's server binaries (Debian's postgresql package)")
	if os.Geteuid() == 0 {
		_, err := user.Lookup("postgres")
		testutil.Need(t, err == nil, "a postgres user to run the server as, when run as root (Debian's postgresql package makes it)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// The postgres user must reach dir: open up the test's own directory
	// above it (made 0700 by the testing package), for search only.
	if os.Geteuid() == 0 {
		if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Run(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return s.URL()
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
