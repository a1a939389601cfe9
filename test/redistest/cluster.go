package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters (no replicas), each a
// redis-server process owned by the test, data-less, on free loopback ports
// (client and cluster-bus port), stopped by t.Cleanup.
type Cluster struct {
	t     testing.TB
	nodes []*Server
}

// StartCluster starts three redis-server nodes with --cluster-enabled yes,
// joins them with "redis-cli --cluster create ... --cluster-yes" (the 16384
// slots split in three) and waits until every node reports cluster_state:ok.
// It needs redis-cli (Debian package redis-tools) and calls t.Fatal, never
// Skip, if a binary is missing or the cluster does not form within
// startTimeout.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: redis-cli not found on PATH (%v); install it with: apt-get update && apt-get install -y redis-tools", err)
	}
	bin := serverBin(t)
	c := &Cluster{t: t}
	for i := 0; i < 3; i++ {
		c.nodes = append(c.nodes, startServer(t, bin, clusterArgs, serverReady))
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}
	c.waitOK()
	return c
}

// clusterArgs is serverArgs plus cluster mode, with a free cluster-bus port
// and the nodes file in the server's directory.
func clusterArgs(s *Server) ([]string, error) {
	bus, err := freePort()
	if err != nil {
		return nil, err
	}
	args, err := serverArgs(nil)(s)
	if err != nil {
		return nil, err
	}
	return append(args,
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(s.dir, "nodes-"+strconv.Itoa(s.port)+".conf"),
		"--cluster-port", strconv.Itoa(bus),
		"--cluster-node-timeout", "2000",
	), nil
}

// waitOK waits until every node says cluster_state:ok and knows 3 masters.
func (c *Cluster) waitOK() {
	c.t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		var bad []string
		for _, n := range c.nodes {
			info, err := n.clusterInfo()
			if err != nil || info["cluster_state"] != "ok" || info["cluster_size"] != "3" || info["cluster_known_nodes"] != "3" {
				bad = append(bad, fmt.Sprintf("%s: %v %v", n.Addr(), info["cluster_state"], err))
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: cluster not ok within %s: %s", startTimeout, strings.Join(bad, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterInfo runs CLUSTER INFO and returns its "name:value" lines.
func (s *Server) clusterInfo() (map[string]string, error) {
	cl := s.Client()
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	raw, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(raw, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// Nodes returns the three nodes (their Addr, ConnectedClients...).
func (c *Cluster) Nodes() []*Server { return c.nodes }

// URL returns the go-redis cluster URL of the three nodes,
// "redis://<node1>?addr=<node2>&addr=<node3>" (redis.ParseClusterURL syntax).
func (c *Cluster) URL() string {
	u := "redis://" + c.nodes[0].Addr()
	for i, n := range c.nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + n.Addr()
	}
	return u
}
