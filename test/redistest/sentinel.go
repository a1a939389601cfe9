package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel timings: small, so a failover takes about a second.
const (
	// SentinelDownAfter is the sentinel's down-after-milliseconds: a primary
	// that does not answer for this long is considered down.
	SentinelDownAfter = 500 * time.Millisecond
	// SentinelFailoverTimeout is the sentinel's failover-timeout.
	SentinelFailoverTimeout = 2 * time.Second
	// MasterName is the name the sentinel monitors the primary under.
	MasterName = "mymaster"
)

// Sentinel is a primary, one replica of it and one sentinel monitoring them
// (quorum 1), every one a process owned by the test, data-less, on a free
// loopback port, stopped by t.Cleanup.
type Sentinel struct {
	t        testing.TB
	primary  *Server
	replica  *Server
	sentinel *Server
}

// StartSentinel starts the primary, the replica (waiting until it is in
// sync) and the sentinel (waiting until it monitors the primary and has
// discovered the replica). The sentinel is the redis-sentinel binary (Debian
// package redis-sentinel) or, if it is missing, "redis-server <conf>
// --sentinel" (the same program). It calls t.Fatal, never Skip, if a binary is
// missing or a process does not come up within startTimeout.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	primary := Start(t)
	replica := StartReplica(t, primary)
	bin, args := sentinelCommand(t)
	sen := startServer(t, bin, func(s *Server) ([]string, error) {
		conf := filepath.Join(s.dir, "sentinel.conf") // rewritten by the sentinel
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %q\nlogfile \"\"\ndaemonize no\n"+
			"sentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s %d\n",
			s.port, s.dir, MasterName, primary.Port(),
			MasterName, SentinelDownAfter.Milliseconds(), MasterName, SentinelFailoverTimeout.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		return append([]string{conf}, args...), nil
	}, func(s *Server) string { return "Running mode=sentinel, port=" + strconv.Itoa(s.port) + "." })
	st := &Sentinel{t: t, primary: primary, replica: replica, sentinel: sen}
	st.waitReplicaKnown()
	return st
}

// sentinelCommand returns the sentinel program and its arguments after the
// configuration file.
func sentinelCommand(t testing.TB) (string, []string) {
	t.Helper()
	if bin, err := exec.LookPath("redis-sentinel"); err == nil {
		return bin, nil
	}
	if bin, err := exec.LookPath("redis-server"); err == nil {
		return bin, []string{"--sentinel"}
	}
	t.Fatalf("redistest: neither redis-sentinel nor redis-server found on PATH; install them with: apt-get update && apt-get install -y redis-server redis-sentinel")
	return "", nil
}

// waitReplicaKnown waits until the sentinel lists the replica as a healthy
// slave of MasterName (else a failover would find no replica to promote).
func (s *Sentinel) waitReplicaKnown() {
	s.t.Helper()
	c := s.sentinelClient()
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		reps, err := c.Replicas(ctx, MasterName).Result()
		cancel()
		for _, r := range reps {
			if net.JoinHostPort(r["ip"], r["port"]) == s.replica.Addr() && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: sentinel %s did not discover replica %s within %s: %v %v", s.sentinel.Addr(), s.replica.Addr(), startTimeout, reps, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Sentinel) sentinelClient() *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{
		Addr: s.sentinel.Addr(), MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, DisableIdentity: true,
	})
}

// FailoverURL returns the go-redis failover URL of this setup,
// "redis://127.0.0.1:<sentinel port>/0?master_name=mymaster" (the syntax of
// redis.ParseFailoverURL).
func (s *Sentinel) FailoverURL() string {
	return "redis://" + s.sentinel.Addr() + "/0?master_name=" + MasterName
}

// Primary is the server that was the primary at start (its Addr, Stop...).
func (s *Sentinel) Primary() *Server { return s.primary }

// Replica is the server that was the replica at start.
func (s *Sentinel) Replica() *Server { return s.replica }

// SentinelServer is the sentinel process (its Addr, Port).
func (s *Sentinel) SentinelServer() *Server { return s.sentinel }

// MasterAddr asks the sentinel for the current primary's "host:port"
// (SENTINEL get-master-addr-by-name). Errors: the connection's or the
// command's.
func (s *Sentinel) MasterAddr() (string, error) {
	c := s.sentinelClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hp, err := c.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("redistest: get-master-addr-by-name: %v", hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// KillPrimary kills the start primary (SIGKILL, like a crash); see Server.Stop.
func (s *Sentinel) KillPrimary() { s.primary.Stop() }

// WaitFailover polls the sentinel (every 20 ms) until it names a primary other
// than the start primary and that server reports role:master, and returns the
// new primary's address. It calls t.Fatal when timeout passes first.
func (s *Sentinel) WaitFailover(timeout time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var addr string
	var err error
	for {
		addr, err = s.MasterAddr()
		if err == nil && addr != s.primary.Addr() {
			if addr == s.replica.Addr() {
				if info, ierr := s.replica.Info("replication"); ierr == nil && info["role"] == "master" {
					return addr
				}
			} else {
				s.t.Fatalf("redistest: sentinel names an unknown primary %s", addr)
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: no failover within %s: sentinel says %q (%v)", timeout, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// String describes the setup for failure messages.
func (s *Sentinel) String() string {
	return strings.Join([]string{"primary " + s.primary.Addr(), "replica " + s.replica.Addr(), "sentinel " + s.sentinel.Addr()}, ", ")
}
