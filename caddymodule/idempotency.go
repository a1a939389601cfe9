// The idempotency block's guard and store, as Provision builds them (the request path's step is gate/idempotency.go).

package caddymodule

import (
	"cmp"
	"fmt"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
)

// provisionIdempotency builds the guard over the shared store of the
// configured identity (memory store unless configured).
//
// Errors: an unknown store; a bad Redis URL or mode; a file store that
// cannot be opened. The bounds and invariants are Validate's (config/validate.go).
func (h *Handler) provisionIdempotency(g *gate.Gate, log *zap.Logger) error {
	ic := h.Idempotency
	if ic == nil {
		ic = &config.IdempotencyConfig{}
	}
	if ic.Store == "off" {
		return nil
	}
	opts := idempotency.Options{
		TTL: ic.TTL.D(), LockTTL: ic.LockTTL.D(), WaitTimeout: ic.WaitTimeout.D(), UpstreamTimeout: ic.UpstreamTimeout.D(),
		Observer: g.IdempotencyObserver(g.Metrics.IdempotencyObserver(log)),
	}
	prefix := ic.KeyPrefix
	if prefix == "" {
		// Records of two servers sharing one Redis never mix.
		prefix = idempotency.DefaultRedisKeyPrefix + g.ServerID + ":"
	}
	identity, err := storeIdentity(ic, g.ServerID, prefix)
	if err != nil {
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	st, err := acquireStore(identity, func() (idempotency.Store, error) { return openStore(ic, prefix) })
	if err != nil {
		return fmt.Errorf("supervaizer_auth: idempotency store %s: %w", ic.Store, err)
	}
	applyLimits(st, ic)
	g.IdemStore = st
	g.Releases = append(g.Releases, func() { releaseStore(st.identity) }) // closed when no gate holds it and its forwards have ended
	g.Idem = idempotency.New(st, opts)
	g.MaxRecordBytes = cmp.Or(ic.MaxRecordBytes, config.DefaultMaxRecordBytes)
	g.IdemActions = map[string]bool{"job.start": true}
	for _, a := range ic.Actions {
		g.IdemActions[a] = true
	}
	g.RequireIdemKey = ic.RequireKey
	return nil
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
