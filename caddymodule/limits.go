// The limits block: its JSON configuration and
// the limiter Provision builds over a State shared across reloads (the
// request path's step is gate/limits.go; docs/limits.md, "Fair sharing of an
// agent: limits").

package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/limits"
)

// LimitsConfig is the limits block: rules, where rate state lives, and its
// bounds (docs/limits.md, "Fair sharing of an agent: limits"). Absent: no limit.
type LimitsConfig struct {
	// Rate rules: a token bucket per (agent, verified workspace), or per
	// (agent, transport key) for a call without one, for the calls whose
	// target matches (surface loads are surface:<id>). Caddyfile:
	// rate <pattern>... <n>/<s|m|h> [burst <b>].
	Rate []RateLimit `json:"rate,omitempty"`
	// Concurrency rules: calls of one (agent, workspace) in flight to the
	// agent through this sidecar. Caddyfile: concurrency <pattern>... <n>.
	Concurrency []ConcurrencyLimit `json:"concurrency,omitempty"`
	// Store is where rate state lives: "memory" (default: this process) or
	// "redis" (shared by every sidecar using the same Redis and key_prefix).
	Store string `json:"store,omitempty"`
	// RedisURL is the Redis address (required with store redis) in the
	// syntax of RedisMode, as idempotency's redis_url.
	RedisURL string `json:"redis_url,omitempty"`
	// RedisMode is "single" (default), "sentinel" or "cluster", as
	// idempotency's redis_mode.
	RedisMode string `json:"redis_mode,omitempty"`
	// MinReplicasAck is the number of Redis replicas that must acknowledge
	// each bucket update (Redis WAIT); fewer is a store error. Default 0,
	// at most 16 (gate/bounds.go); store redis only, as RedisURL, RedisMode,
	// ReplicaAckTimeout and KeyPrefix.
	MinReplicasAck int `json:"min_replicas_ack,omitempty"`
	// ReplicaAckTimeout bounds each such WAIT (default 500 ms, at most 1m).
	ReplicaAckTimeout caddy.Duration `json:"replica_ack_timeout,omitempty"`
	// KeyPrefix of every Redis key (default supervaizer:limit:<server_id>:).
	KeyPrefix string `json:"key_prefix,omitempty"`
	// OnStoreError is what a call does when Redis fails: "local" (default:
	// counted in this sidecar's own buckets, with a warn line, a metric and
	// a readiness note) or "deny" (refused rate_limited, retry after 1 s).
	OnStoreError string `json:"on_store_error,omitempty"`
	// MaxKeys bounds the tracked keys kept in memory in each of two pools:
	// rule × agent × verified workspace, and rule × agent × transport key
	// (calls without a verified workspace), least recently used of the pool
	// dropped first (default 100,000; 1 to 10,000,000; the Caddyfile refuses
	// 0).
	MaxKeys int `json:"max_keys,omitempty"`
}

// RateLimit is one rate rule.
type RateLimit struct {
	// Targets are target patterns (introspection's actions language).
	Targets []string `json:"targets"`
	// Rate is "<n>/s", "<n>/m" or "<n>/h", n from 1 to 1,000,000.
	Rate string `json:"rate"`
	// Burst is the bucket size (default n; the Caddyfile refuses 0).
	Burst int `json:"burst,omitempty"`
}

// ConcurrencyLimit is one concurrency rule.
type ConcurrencyLimit struct {
	// Targets are target patterns (introspection's actions language).
	Targets []string `json:"targets"`
	// Max is the calls in flight allowed, 1 to 100,000.
	Max int `json:"max"`
}

// limitsPool holds the limit States by identity: a reload with the same
// store settings keeps every budget (Caddy provisions the new config
// before it cleans up the old one).
var limitsPool = caddy.NewUsagePool()

// provisionLimits builds the gate's Limiter of lc (nil: none) over the State of its store
// identity (shared across reloads). Validate has run.
func provisionLimits(g *gate.Gate, lc *limits.Config, log *zap.Logger) error {
	if lc == nil {
		return nil
	}
	rules, errs := lc.Rules()
	if len(errs) > 0 {
		return nil // reported by Validate
	}
	ro, identity := lc.Redis(g.ServerID)
	v, _, err := limitsPool.LoadOrNew(identity, func() (caddy.Destructor, error) {
		return limits.NewState(lc.MaxKeys, ro)
	})
	if err != nil {
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	st := v.(*limits.State)
	st.SetMaxKeys(lc.MaxKeys)
	l, err := limits.NewLimiter(st, rules, lc.OnStoreError, g.Metrics.LimitsObserver(log))
	if err != nil {
		_, _ = limitsPool.Delete(identity)
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	g.Limits = &gate.LimitGate{Limiter: l, OnStoreError: lc.EffectiveOnStoreError()}
	g.Releases = append(g.Releases, func() { _, _ = limitsPool.Delete(identity) }) // its State closes when no gate holds it
	return nil
}
