package caddymodule

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
)

// Idempotency stores outlive the gate that opened them: the sharing and
// the in-flight count that keeps a store open under a running forward are
// idempotency.Shared's (idempotency/shared.go); Caddy's usage pool holds
// one reference per gate, and the last one gone releases the gate's hold.
var idemStorePool = caddy.NewUsagePool()

// pooledIdemStore is a Shared store in Caddy's usage pool.
type pooledIdemStore struct{ *idempotency.Shared }

// Destruct implements caddy.Destructor: the last gate holding the store is
// gone (the store closes once no forward uses it).
func (p pooledIdemStore) Destruct() error { return p.Shared.Leave() }

// acquireStore returns the shared store of identity, opening it with open
// if no live or draining store has that identity. Every successful call
// must be paired with one releaseStore(identity).
func acquireStore(identity string, open func() (idempotency.Store, error)) (*idempotency.Shared, error) {
	v, _, err := idemStorePool.LoadOrNew(identity, func() (caddy.Destructor, error) {
		s, err := idempotency.Acquire(identity, open)
		if err != nil {
			return nil, err
		}
		return pooledIdemStore{s}, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(pooledIdemStore).Shared, nil
}

// releaseStore gives back one gate's reference to identity's store.
func releaseStore(identity string) {
	_, _ = idemStorePool.Delete(identity)
}

// storeIdentity names what makes two store settings the same store: its
// kind and where its records live. Bounds and timeouts are not part of it
// (a reload that changes them keeps the records: see applyLimits). The
// server id separates the memory stores of two servers in one process.
//
// Shapes: "memory|<server_id>", "file|<absolute path>",
// "redis|<mode>|<url>|<key prefix>|<min replicas ack>|<ack timeout>".
func storeIdentity(ic *config.IdempotencyConfig, serverID, prefix string) (string, error) {
	switch ic.Store {
	case "", "memory":
		return "memory|" + serverID, nil
	case "file":
		if ic.FilePath == "" {
			return "", fmt.Errorf("idempotency store file needs a path: store file <path> (JSON file_path)")
		}
		abs, err := filepath.Abs(ic.FilePath)
		if err != nil {
			return "", fmt.Errorf("idempotency file_path %q: %w", ic.FilePath, err)
		}
		return "file|" + abs, nil
	case "redis":
		mode := ic.RedisMode
		if mode == "" {
			mode = "single"
		}
		return "redis|" + mode + "|" + ic.RedisURL + "|" + prefix + "|" + strconv.Itoa(ic.MinReplicasAck) +
			"|" + time.Duration(ic.ReplicaAckTimeout).String(), nil
	}
	return "", fmt.Errorf("idempotency store must be memory, file, redis or off, not %q", ic.Store)
}
