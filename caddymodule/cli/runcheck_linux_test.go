//go:build linux

package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRunPrecheckRefusesListenInUse: `run` with a config (a Caddyfile or
// JSON) whose server listens on a TCP address another listener holds —
// a plain one, or one with SO_REUSEPORT as Caddy binds it, which would let
// a second process bind the same port — is refused naming the address;
// once the address is free the same config passes.
func TestRunPrecheckRefusesListenInUse(t *testing.T) {
	for _, reuse := range []bool{false, true} {
		lc := net.ListenConfig{}
		if reuse {
			lc.Control = func(_, _ string, c syscall.RawConn) error {
				var serr error
				if err := c.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, 0xf, 1) // SO_REUSEPORT on Linux
				}); err != nil {
					return err
				}
				return serr
			}
		}
		ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		dir := t.TempDir()
		cf := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(cf, []byte("http://"+addr+" {\n\trespond 200\n}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		js := filepath.Join(dir, "config.json")
		if err := os.WriteFile(js, []byte(`{"apps":{"http":{"servers":{"s":{"listen":["`+addr+`"]}}}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"run", "--config", cf, "--adapter", "caddyfile"},
			{"run", "--config", cf},
			{"start", "--config", js},
		} {
			err := RunPrecheck(args)
			// The Caddyfile's site listens on every interface (":port").
			_, port, _ := net.SplitHostPort(addr)
			if err == nil || !strings.Contains(err.Error(), ":"+port+" is already in use by another process") {
				t.Errorf("reuseport %v, %q: %v, want refused naming port %s", reuse, args, err, port)
			}
		}
		ln.Close()
		for _, args := range [][]string{{"run", "--config", cf}, {"run", "--config", js}} {
			if err := RunPrecheck(args); err != nil {
				t.Errorf("%q with the address free: %v", args, err)
			}
		}
	}
}
