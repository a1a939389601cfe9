// Package redistest runs a real, throw-away redis-server for tests.
//
// Start needs the redis-server binary on PATH (Debian/Ubuntu: apt-get install
// -y redis-server). It never skips: a missing binary fails the test, so Redis
// tests cannot silently stop running. The server keeps no data on disk
// (--save "" --appendonly no), listens on 127.0.0.1 only, on a free port, and
// is stopped by t.Cleanup. Stop and Restart let a test take Redis away and
// bring it back on the same port (with no data: it is a fresh process).
package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long Start and Restart wait for PING to answer.
const startTimeout = 15 * time.Second

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	mu     sync.Mutex
	proc   *os.Process // nil when stopped
	exited chan error  // receives cmd.Wait's result once
}

// Start finds redis-server on PATH, starts it on a free loopback port, waits
// until it answers PING and registers Stop with t.Cleanup. It calls t.Fatal if
// the binary is missing or the server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found on PATH (%v); install it with: apt-get update && apt-get install -y redis-server", err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
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
	t.Fatalf("redistest: start redis-server: %v", lastErr)
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
// (empty: no data survives). It calls t.Fatal if the server does not come up.
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
			s.t.Fatalf("redistest: restart redis-server on port %d: %v", s.port, err)
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
	out := &syncBuffer{}
	cmd := exec.Command(s.bin,
		"--save", "",
		"--appendonly", "no",
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
	)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.Now().Add(startTimeout)
	for {
		// "Ready to accept connections" proves that this process, not another
		// one that took the port, is listening.
		if strings.Contains(out.String(), "Ready to accept connections") && ping(s.Addr()) == nil {
			s.proc, s.exited = cmd.Process, exited
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited (%v): %s", err, strings.TrimSpace(out.String()))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server did not answer PING within %s: %s", startTimeout, strings.TrimSpace(out.String()))
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
