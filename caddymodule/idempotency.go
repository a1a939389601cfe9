// The idempotency block: its configuration and the guard and store
// Provision builds (the request path's step is gate/idempotency.go).

package caddymodule

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
)

// IdempotencyConfig makes confirm actions safe to retry in the proxy
// (docs/idempotency.md: the guarantee, the stores, what each survives).
type IdempotencyConfig struct {
	// Store is "memory" (default: one process, lost at restart), "file"
	// (an embedded database file at FilePath: survives restarts of one
	// process), "redis" (shared by replicas) or "off".
	Store string `json:"store,omitempty"`
	// FilePath is the file store's database file (store file <path>); its
	// directory is created if missing. One process per file.
	FilePath string `json:"file_path,omitempty"`
	// RedisURL is the Redis address in the syntax of RedisMode (default
	// redis://127.0.0.1:6379/0).
	RedisURL string `json:"redis_url,omitempty"`
	// RedisMode is "single" (default), "sentinel" (RedisURL in the failover
	// syntax, redis://host:26379?master_name=mymaster&addr=host2:26379) or
	// "cluster" (redis://host1:7000?addr=host2:7001).
	RedisMode string `json:"redis_mode,omitempty"`
	// MinReplicasAck is the number of Redis replicas that must acknowledge
	// a claim before the call is forwarded, and a record after it (Redis
	// WAIT); 0 (default) waits for none.
	MinReplicasAck int `json:"min_replicas_ack,omitempty"`
	// ReplicaAckTimeout bounds each such WAIT (default 500 ms); fewer
	// acknowledgements by then count as not replicated.
	ReplicaAckTimeout caddy.Duration `json:"replica_ack_timeout,omitempty"`
	// KeyPrefix of every Redis key (default supervaizer:idem:<server_id>:).
	KeyPrefix string `json:"key_prefix,omitempty"`
	// TTL of a record (default 24 h, at least 1 s).
	TTL caddy.Duration `json:"ttl,omitempty"`
	// LockTTL of an in-flight mark (default 2 min, at least 1 s): after a forward whose
	// outcome is unknown, retries get idempotency_in_progress this long.
	LockTTL caddy.Duration `json:"lock_ttl,omitempty"`
	// WaitTimeout bounds how long a retry waits on an in-flight call
	// (default 30 s, at least 1 s).
	WaitTimeout caddy.Duration `json:"wait_timeout,omitempty"`
	// UpstreamTimeout bounds a covered call to the agent (default 60 s, at
	// least 1 s; in JSON nanoseconds, so 1 is 1 ns and refused).
	UpstreamTimeout caddy.Duration `json:"upstream_timeout,omitempty"`
	// Actions covered besides job.start and the contract's setup start action.
	Actions []string `json:"actions,omitempty"`
	// RequireKey refuses covered calls without idempotency_key (-32602).
	RequireKey bool `json:"require_idempotency_key,omitempty"`
	// MaxEntries bounds the records and in-flight marks of the memory and
	// file stores (default 10,000). With the Redis store it bounds nothing
	// itself (Redis's maxmemory does) but sets the default and the ceiling
	// of MaxEntriesPerWorkspace.
	MaxEntries int `json:"max_entries,omitempty"`
	// MaxBytes bounds the recorded bytes of the memory and file stores
	// (default 64 MiB). With the Redis store it bounds nothing itself
	// (Redis's maxmemory does) but sets the default and the ceiling of
	// MaxBytesPerWorkspace.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// MaxEntriesPerWorkspace bounds one workspace's live records and
	// in-flight marks in every store (default max_entries/8, at most
	// max_entries): over it the workspace's own new keys are refused
	// (idempotency_store_unavailable, a message naming this setting),
	// never its neighbours'. Fewer than 8 workspaces at their default
	// shares cannot fill the store (docs/idempotency.md, "A workspace's
	// share").
	MaxEntriesPerWorkspace int `json:"max_entries_per_workspace,omitempty"`
	// MaxBytesPerWorkspace bounds the recorded bytes of one workspace in
	// every store (default max_bytes/8, at most max_bytes): an answer that
	// would take its workspace past it is passed to the caller once, not
	// recorded, and its key stays in flight until lock_ttl (as an answer
	// over max_record_bytes), so one tenant cannot fill max_bytes (or
	// Redis's maxmemory) for the others.
	MaxBytesPerWorkspace int64 `json:"max_bytes_per_workspace,omitempty"`
	// MaxRecordBytes bounds one covered answer kept in memory to be
	// recorded (default 1 MiB): a larger answer is passed to the caller
	// once, not recorded, and its key stays in flight until lock_ttl.
	MaxRecordBytes int64 `json:"max_record_bytes,omitempty"`
}

// defaultMaxRecordBytes is the default bound of a recorded answer: 1 MiB.
const defaultMaxRecordBytes = 1 << 20

// provisionIdempotency builds the guard over the shared store of the
// configured identity (memory store unless configured).
//
// Errors: an unknown store; a bad Redis URL or mode; a file store that
// cannot be opened. The bounds and invariants are Validate's (gate/config.go).
func (h *Handler) provisionIdempotency(g *gate.Gate, log *zap.Logger) error {
	ic := h.Idempotency
	if ic == nil {
		ic = &IdempotencyConfig{}
	}
	if ic.Store == "off" {
		return nil
	}
	opts := idempotency.Options{
		TTL: time.Duration(ic.TTL), LockTTL: time.Duration(ic.LockTTL),
		WaitTimeout: time.Duration(ic.WaitTimeout), UpstreamTimeout: time.Duration(ic.UpstreamTimeout),
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
	g.MaxRecordBytes = ic.MaxRecordBytes
	if g.MaxRecordBytes == 0 {
		g.MaxRecordBytes = defaultMaxRecordBytes
	}
	g.IdemActions = map[string]bool{"job.start": true}
	for _, a := range ic.Actions {
		g.IdemActions[a] = true
	}
	g.RequireIdemKey = ic.RequireKey
	return nil
}

// openStore opens a new store of ic's kind (called once per identity).
func openStore(ic *IdempotencyConfig, prefix string) (idempotency.Store, error) {
	switch ic.Store {
	case "", "memory":
		return idempotency.NewMemoryStore(memoryLimits(ic)), nil
	case "file":
		l := memoryLimits(ic)
		return idempotency.NewFileStore(idempotency.FileOptions{Path: ic.FilePath, MaxEntries: l.MaxEntries,
			MaxEntriesPerGroup: l.MaxEntriesPerGroup, MaxBytes: l.MaxBytes, MaxBytesPerGroup: l.MaxBytesPerGroup})
	case "redis":
		return idempotency.NewRedisStore(idempotency.RedisOptions{URL: ic.RedisURL, KeyPrefix: prefix,
			Mode: ic.RedisMode, MinReplicasAck: ic.MinReplicasAck, ReplicaAckTimeout: time.Duration(ic.ReplicaAckTimeout),
			MaxEntriesPerGroup: memoryLimits(ic).Resolved().MaxEntriesPerGroup,
			MaxBytesPerGroup:   memoryLimits(ic).Resolved().MaxBytesPerGroup})
	}
	return nil, fmt.Errorf("store %q cannot be opened", ic.Store)
}
