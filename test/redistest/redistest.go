// Package redistest runs real, throw-away Redis processes for tests: a plain
// redis-server (Start), a replica of one (StartReplica), a primary + replica +
// Sentinel set (StartSentinel, in sentinel.go) and a three-master Cluster
// (StartCluster, in cluster.go).
//
// Start needs the redis-server binary on PATH (Debian/Ubuntu: apt-get install
// -y redis-server); StartSentinel also runs redis-sentinel, or redis-server
// --sentinel when that is missing (Debian package redis-sentinel);
// StartCluster needs redis-cli (Debian package redis-tools). Nothing here
// skips: a missing binary fails the test with the install command, so Redis
// tests cannot silently stop running. Every process keeps no data on disk
// (--save "" --appendonly no), listens on 127.0.0.1 only, on a free port, and
// is stopped by t.Cleanup. Stop and Restart let a test take a server away and
// bring it back on the same port, with the same arguments (a replica
// replicates again) and no data: it is a fresh process.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long Start and Restart wait for PING to answer.
const startTimeout = 15 * time.Second

// Server is one redis-server (or redis-sentinel) process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	// argv returns the command line for the current port (data-less, on
	// loopback); ready is the log text that proves this process came up.
	argv  func(s *Server) ([]string, error)
	ready func(s *Server) string

	mu     sync.Mutex
	proc   *os.Process // nil when stopped
	exited chan error  // receives cmd.Wait's result once
}

// Start finds redis-server on PATH, starts it on a free loopback port, waits
// until it answers PING and registers Stop with t.Cleanup. It calls t.Fatal if
// the binary is missing or the server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	return startServer(t, serverBin(t), serverArgs(nil), serverReady)
}

// StartDurable starts a redis-server like Start but with its data kept on
// disk in the test's directory (append-only file, fsync on every write), so
// Restart brings the same data back: a Redis restart, not a data loss.
func StartDurable(t testing.TB) *Server {
	t.Helper()
	return startServer(t, serverBin(t), durableArgs, serverReady)
}

// durableArgs is serverArgs with the append-only file on and fsync always
// (later arguments override earlier ones).
func durableArgs(s *Server) ([]string, error) {
	args, err := serverArgs(nil)(s)
	return append(args, "--appendonly", "yes", "--appendfsync", "always"), err
}

// StartReplica starts a redis-server like Start, replicating primary
// (--replicaof), and waits until its replication link is up (the initial
// sync is done). It calls t.Fatal if that does not happen within startTimeout.
func StartReplica(t testing.TB, primary *Server) *Server {
	t.Helper()
	r := startServer(t, serverBin(t), serverArgs(func() []string {
		return []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())}
	}), serverReady)
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := r.Info("replication")
		if err == nil && info["master_link_status"] == "up" {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s of %s not in sync within %s (%v): %v", r.Addr(), primary.Addr(), startTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func serverBin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found on PATH (%v); install it with: apt-get update && apt-get install -y redis-server", err)
	}
	return bin
}

// serverArgs is the data-less loopback command line, plus extra's arguments.
func serverArgs(extra func() []string) func(s *Server) ([]string, error) {
	return func(s *Server) ([]string, error) {
		args := []string{
			"--save", "",
			"--appendonly", "no",
			"--port", strconv.Itoa(s.port),
			"--bind", "127.0.0.1",
			"--dir", s.dir,
			"--daemonize", "no",
			"--logfile", "",
			// A replica's first sync starts at once (the default waits 5 s).
			"--repl-diskless-sync", "yes",
			"--repl-diskless-sync-delay", "0",
		}
		if extra != nil {
			args = append(args, extra()...)
		}
		return args, nil
	}
}

// serverReady: "Ready to accept connections" proves that this process, not
// another one that took the port, is listening.
func serverReady(*Server) string { return "Ready to accept connections" }

// startServer starts a process on a free port (retrying if the port is
// taken between probe and bind) and registers Stop with t.Cleanup.
func startServer(t testing.TB, bin string, argv func(*Server) ([]string, error), ready func(*Server) string) *Server {
	t.Helper()
	s := &Server{t: t, bin: bin, dir: t.TempDir(), argv: argv, ready: ready}
	t.Cleanup(s.Stop)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ { // a free port can be taken between probe and bind
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: find a free port: %v", err)
		}
		s.port = port
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: start %s: %v", filepath.Base(bin), lastErr)
	return nil
}

// Addr returns "127.0.0.1:<port>".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL returns "redis://127.0.0.1:<port>/0".
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Port returns the TCP port, the same across Restart.
func (s *Server) Port() int { return s.port }

// Stop kills the server (SIGKILL, like a crash) and waits for it to exit.
// Calling it on a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Kill()
	<-s.exited
	s.proc, s.exited = nil, nil
}

// Restart stops the server if it runs and starts a fresh one on the same port
// (empty: no data survives, unless it was started by StartDurable). It calls t.Fatal if the server does not come up.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: restart %s on port %d: %v", filepath.Base(s.bin), s.port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	args, err := s.argv(s)
	if err != nil {
		return err
	}
	out := &syncBuffer{}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.Now().Add(startTimeout)
	for {
		if strings.Contains(out.String(), s.ready(s)) && ping(s.Addr()) == nil {
			s.proc, s.exited = cmd.Process, exited
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("%s exited (%v): %s", filepath.Base(s.bin), err, strings.TrimSpace(out.String()))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("%s did not answer PING within %s: %s", filepath.Base(s.bin), startTimeout, strings.TrimSpace(out.String()))
		}
	}
}

// ping sends a raw PING and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("unexpected PING reply %q", line)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// syncBuffer collects the server's output for error messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 64<<10 {
		return len(p), nil
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Info runs INFO section on the server and returns its "name:value" lines
// as a map. Errors: the connection's or the command's.
func (s *Server) Info(section string) (map[string]string, error) {
	c := s.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	raw, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(raw, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// ConnectedClients returns INFO clients' connected_clients minus one: the
// number of client connections other than the one asking (pub/sub
// connections included). Errors: as Info.
func (s *Server) ConnectedClients() (int, error) {
	info, err := s.Info("clients")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(info["connected_clients"])
	if err != nil {
		return 0, fmt.Errorf("redistest: INFO clients: connected_clients %q: %v", info["connected_clients"], err)
	}
	return n - 1, nil
}

// Client returns a go-redis client of the server for one-off commands (no
// retries, short timeouts); the caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		DisableIdentity: true,
	})
}
