package redistest

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.URL(), "redis://127.0.0.1:") || !strings.HasSuffix(s.URL(), "/0") {
		t.Fatalf("URL = %q", s.URL())
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Start: %v", err)
	}
	port := s.Port()

	s.Stop()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("ping succeeded after Stop")
	}
	s.Stop() // idempotent

	s.Restart()
	if s.Port() != port {
		t.Fatalf("port changed across Restart: %d -> %d", port, s.Port())
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Restart: %v", err)
	}
	s.Restart() // from running
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after second Restart: %v", err)
	}
}

func TestListensOnLoopbackOnly(t *testing.T) {
	s := Start(t)
	host, _, err := net.SplitHostPort(s.Addr())
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("Addr = %q", s.Addr())
	}
}

func TestTwoServersDistinctPorts(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Port() == b.Port() {
		t.Fatalf("same port %d", a.Port())
	}
	a.Stop()
	if err := ping(b.Addr()); err != nil {
		t.Fatalf("second server down after stopping the first: %v", err)
	}
}

// fatalTB records Fatalf and stops the caller with a panic, so Start can be
// tested for failing (not skipping) when redis-server is missing.
type fatalTB struct {
	testing.TB
	msg string
}

type fatalStop struct{}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatalStop{})
}
func (f *fatalTB) Skip(...any)          { panic("Start must not skip") }
func (f *fatalTB) Skipf(string, ...any) { panic("Start must not skip") }
func (f *fatalTB) SkipNow()             { panic("Start must not skip") }

func TestStartFailsWithoutBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	f := &fatalTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(fatalStop); !ok {
					panic(r)
				}
			}
		}()
		Start(f)
	}()
	if !strings.Contains(f.msg, "apt-get install -y redis-server") {
		t.Fatalf("Fatalf message = %q, want the install hint", f.msg)
	}
}
