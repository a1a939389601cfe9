// The idempotency block's shared store (the guard over it is gate.New's,
// gate/new.go; the request path's step is gate/idempotency.go).

package caddymodule

import (
	"fmt"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
)

// IdempotencyStore is the shared store of ic's settings (gate.Shared),
// opened once per identity, its bounds applied. Errors: an unknown store;
// a bad Redis URL or mode; a file store that cannot be opened.
func (pools) IdempotencyStore(ic *config.IdempotencyConfig, serverID string) (idempotency.Store, func(), error) {
	prefix := ic.KeyPrefix
	if prefix == "" {
		// Records of two servers sharing one Redis never mix.
		prefix = idempotency.DefaultRedisKeyPrefix + serverID + ":"
	}
	identity, err := storeIdentity(ic, serverID, prefix)
	if err != nil {
		return nil, nil, fmt.Errorf("supervaizer_auth: %w", err)
	}
	st, err := acquireStore(identity, func() (idempotency.Store, error) { return openStore(ic, prefix) })
	if err != nil {
		return nil, nil, fmt.Errorf("supervaizer_auth: idempotency store %s: %w", ic.Store, err)
	}
	st.SetLimits(ic.MemoryLimits())
	return st, func() { releaseStore(identity) }, nil
}

// openStore opens a new store of ic's kind (called once per identity).
func openStore(ic *config.IdempotencyConfig, prefix string) (idempotency.Store, error) {
	switch ic.Store {
	case "", "memory":
		return idempotency.NewMemoryStore(ic.MemoryLimits()), nil
	case "file":
		l := ic.MemoryLimits()
		return idempotency.NewFileStore(idempotency.FileOptions{Path: ic.FilePath, MaxEntries: l.MaxEntries,
			MaxEntriesPerGroup: l.MaxEntriesPerGroup, MaxBytes: l.MaxBytes, MaxBytesPerGroup: l.MaxBytesPerGroup})
	case "redis":
		return idempotency.NewRedisStore(idempotency.RedisOptions{URL: ic.RedisURL, KeyPrefix: prefix,
			Mode: ic.RedisMode, MinReplicasAck: ic.MinReplicasAck, ReplicaAckTimeout: ic.ReplicaAckTimeout.D(),
			MaxEntriesPerGroup: ic.MemoryLimits().Resolved().MaxEntriesPerGroup,
			MaxBytesPerGroup:   ic.MemoryLimits().Resolved().MaxBytesPerGroup})
	}
	return nil, fmt.Errorf("store %q cannot be opened", ic.Store)
}
