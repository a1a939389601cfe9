package caddymodule

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
)

// Idempotency stores outlive the gate that opened them: a Caddy reload
// provisions the new gates before it cleans up the old ones, and both share
// one store when their store settings have the same identity (storeIdentity).
// A store is closed only when no gate holds it any more AND the forwards
// that were using it have finished, so a reload in the middle of a forward
// neither loses its record nor closes the Redis client under it
// (docs/idempotency.md, "The stores, and what each survives").
//
// Two layers: idemStorePool is Caddy's usage pool (one reference per gate
// that holds the store); sharedStores is this package's registry of every
// store not yet closed, live or draining, so that a gate provisioned while
// an older store of the same identity still drains takes that store over
// instead of opening a second one (a file store's lock would refuse the
// second open; a second memory store would not see the in-flight marks).
var (
	idemStorePool = caddy.NewUsagePool()

	sharedStoresMu sync.Mutex
	sharedStores   = map[string]*sharedStore{}
)

// sharedStore is one idempotency store shared by the gates whose settings
// have its identity. owners counts the pool entries that handed it out
// (normally one), inflight the Guard calls running on it.
type sharedStore struct {
	idempotency.Store
	identity string
	owners   int // guarded by sharedStoresMu
	inflight int // guarded by sharedStoresMu
}

// acquireStore returns the shared store of identity, opening it with open
// if no live or draining store has that identity. Every successful call
// must be paired with one releaseStore(identity).
func acquireStore(identity string, open func() (idempotency.Store, error)) (*sharedStore, error) {
	v, _, err := idemStorePool.LoadOrNew(identity, func() (caddy.Destructor, error) {
		sharedStoresMu.Lock()
		defer sharedStoresMu.Unlock()
		if s, ok := sharedStores[identity]; ok { // still draining: take it over
			s.owners++
			return s, nil
		}
		st, err := open()
		if err != nil {
			return nil, err
		}
		s := &sharedStore{Store: st, identity: identity, owners: 1}
		sharedStores[identity] = s
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*sharedStore), nil
}

// releaseStore gives back one gate's reference to identity's store.
func releaseStore(identity string) {
	_, _ = idemStorePool.Delete(identity)
}

// Destruct implements caddy.Destructor: the last gate holding the store is
// gone. The store closes now if no forward uses it, else when the last one
// ends (begin's done).
func (s *sharedStore) Destruct() error {
	sharedStoresMu.Lock()
	s.owners--
	closeNow := s.leaveIfIdle()
	sharedStoresMu.Unlock()
	if closeNow {
		return s.Store.Close()
	}
	return nil
}

// begin marks one Guard call (claim to record/release) in progress on the
// store; done ends it and closes a store that was waiting for it.
func (s *sharedStore) Begin() (done func()) {
	sharedStoresMu.Lock()
	s.inflight++
	sharedStoresMu.Unlock()
	return func() {
		sharedStoresMu.Lock()
		s.inflight--
		closeNow := s.leaveIfIdle()
		sharedStoresMu.Unlock()
		if closeNow {
			_ = s.Store.Close()
		}
	}
}

// leaveIfIdle (under sharedStoresMu) takes the store out of the registry if
// it is unowned and idle, and reports whether it did: the caller then
// closes it.
func (s *sharedStore) leaveIfIdle() bool {
	if s.owners > 0 || s.inflight > 0 || sharedStores[s.identity] != s {
		return false
	}
	delete(sharedStores, s.identity)
	return true
}

// ClaimGroup passes the caller's workspace to the store when it bounds
// workspaces (memory, file and Redis stores: max_entries_per_workspace,
// max_bytes_per_workspace); the embedded Store interface alone would hide
// the method from the Guard, and every workspace would share one group.
func (s *sharedStore) ClaimGroup(ctx context.Context, id, group string, lockTTL time.Duration) (idempotency.ClaimResult, error) {
	if gc, ok := s.Store.(idempotency.GroupClaimer); ok {
		return gc.ClaimGroup(ctx, id, group, lockTTL)
	}
	return s.Store.Claim(ctx, id, lockTTL)
}

var _ idempotency.GroupClaimer = (*sharedStore)(nil)

// Close is a no-op: a gate never closes a shared store itself (see
// releaseStore); the Guard's interface needs the method.
func (s *sharedStore) Close() error { return nil }

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

// limitSetter is a store whose bounds can change while it runs (the memory,
// file and Redis stores): a reload that changes max_entries or
// max_bytes_per_workspace keeps the records.
type limitSetter interface {
	SetLimits(idempotency.MemoryOptions)
}

var (
	_ limitSetter = (*idempotency.MemoryStore)(nil)
	_ limitSetter = (*idempotency.FileStore)(nil)
	_ limitSetter = (*idempotency.RedisStore)(nil)
)

// applyLimits gives a (possibly already open) store the bounds of ic.
func applyLimits(s *sharedStore, ic *config.IdempotencyConfig) {
	if ls, ok := s.Store.(limitSetter); ok {
		ls.SetLimits(ic.MemoryLimits())
	}
}
