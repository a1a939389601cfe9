// The limits block: its configuration, effective settings and
// the limiter Provision builds over a State shared across reloads (the
// request path's step is gate/limits.go; README, "Fair sharing of an
// agent: limits").

package caddymodule

import (
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/limits"
)

// LimitsConfig is the limits block: rules, where rate state lives, and its
// bounds (README, "Fair sharing of an agent: limits"). Absent: no limit.
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
	// at most 16 (settingBounds); store redis only, as RedisURL, RedisMode,
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

// limitRules builds the rules of lc; every problem is named.
func (lc *LimitsConfig) limitRules() ([]*limits.Rule, []error) {
	var rules []*limits.Rule
	var errs []error
	for _, r := range lc.Rate {
		rule, err := limits.NewRateRule(r.Targets, r.Rate, r.Burst)
		if err != nil {
			errs = append(errs, fmt.Errorf("supervaizer_auth: limits rate: %w", err))
			continue
		}
		rules = append(rules, rule)
	}
	for _, c := range lc.Concurrency {
		rule, err := limits.NewConcurrencyRule(c.Targets, c.Max)
		if err != nil {
			errs = append(errs, fmt.Errorf("supervaizer_auth: limits concurrency: %w", err))
			continue
		}
		rules = append(rules, rule)
	}
	return rules, errs
}

// validateLimits is the static check of the limits block (run by Validate
// and Provision alike, so the Caddyfile and the JSON config refuse the
// same values).
func (h *Handler) validateLimits() []error {
	lc := h.Limits
	if lc == nil {
		return nil
	}
	_, errs := lc.limitRules()
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: limits "+format, args...))
	}
	switch lc.Store {
	case "", "memory":
		for _, set := range lc.redisSettingsSet() {
			bad("%s is a setting of the Redis store only (store redis <url>); this block's store is memory", set)
		}
	case "redis":
		if lc.RedisURL == "" {
			bad("store redis needs a URL: store redis <url> (JSON redis_url)")
		}
	default:
		bad("store must be memory or redis, not %q", lc.Store)
	}
	switch lc.RedisMode {
	case "", idempotency.RedisModeSingle, idempotency.RedisModeSentinel, idempotency.RedisModeCluster:
	default:
		bad("redis_mode must be single, sentinel or cluster, not %q", lc.RedisMode)
	}
	switch lc.OnStoreError {
	case "", limits.OnStoreErrorLocal, limits.OnStoreErrorDeny:
	default:
		bad("on_store_error must be local or deny, not %q", lc.OnStoreError)
	}
	if lc.MaxKeys < 0 || lc.MaxKeys > limits.MaxMaxKeys {
		bad("max_keys must be from 1 to %d, not %d", limits.MaxMaxKeys, lc.MaxKeys)
	}
	if len(lc.Rate)+len(lc.Concurrency) == 0 {
		bad("block has no rate or concurrency rule")
	}
	return errs
}

// keyPrefix is the effective Redis key prefix (default
// supervaizer:limit:<server_id>:).
func (lc *LimitsConfig) keyPrefix(serverID string) string {
	if lc.KeyPrefix != "" {
		return lc.KeyPrefix
	}
	return limits.DefaultKeyPrefix + serverID + ":"
}

// redisSettingsSet names the Redis-only settings lc sets (their ranges are
// settingBounds', bounds.go).
func (lc *LimitsConfig) redisSettingsSet() []string {
	var set []string
	for _, s := range []struct {
		name string
		on   bool
	}{
		{"redis_url", lc.RedisURL != ""}, {"redis_mode", lc.RedisMode != ""},
		{"min_replicas_ack", lc.MinReplicasAck != 0}, {"replica_ack_timeout", lc.ReplicaAckTimeout != 0},
		{"key_prefix", lc.KeyPrefix != ""},
	} {
		if s.on {
			set = append(set, s.name)
		}
	}
	return set
}

// provisionLimits builds the gate's Limiter over the State of its store
// identity (shared across reloads). validateLimits has run.
func (h *Handler) provisionLimits(g *gate.Gate, log *zap.Logger) error {
	lc := h.Limits
	if lc == nil {
		return nil
	}
	rules, errs := lc.limitRules()
	if len(errs) > 0 {
		return nil // reported by validate
	}
	var ro *limits.RedisOptions
	identity := "memory|" + g.ServerID
	if lc.Store == "redis" {
		prefix := lc.keyPrefix(g.ServerID)
		ro = &limits.RedisOptions{Mode: lc.RedisMode, URL: lc.RedisURL, KeyPrefix: prefix,
			MinReplicasAck: lc.MinReplicasAck, ReplicaAckTimeout: time.Duration(lc.ReplicaAckTimeout)}
		identity = "redis|" + lc.RedisMode + "|" + lc.RedisURL + "|" + prefix + "|" +
			strconv.Itoa(lc.MinReplicasAck) + "|" + time.Duration(lc.ReplicaAckTimeout).String()
	}
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
	onErr := lc.OnStoreError
	if onErr == "" {
		onErr = limits.OnStoreErrorLocal
	}
	g.Limits = &gate.LimitGate{Limiter: l, OnStoreError: onErr}
	g.Releases = append(g.Releases, func() { _, _ = limitsPool.Delete(identity) }) // its State closes when no gate holds it
	return nil
}

// addLimitsSettings lists the limits (effective settings: supervaizer
// check, /_sidecar/status): each rule as written, then the store (its URL
// redacted; with Redis its min_replicas_ack, replica_ack_timeout and
// key_prefix), on_store_error and max_keys; "limits off" without a block.
func (h *Handler) addLimitsSettings(serverID string, add func(name, value, source string)) {
	lc := h.Limits
	if lc == nil {
		add("limits", "off", "default")
		return
	}
	rules, _ := lc.limitRules()
	for _, r := range rules {
		add("limits rule", r.String(), "config")
	}
	store := "memory"
	if lc.Store == "redis" {
		mode := lc.RedisMode
		if mode == "" {
			mode = idempotency.RedisModeSingle
		}
		store = "redis " + mode + " " + redactURL(lc.RedisURL)
	}
	add("limits store", store, source(lc.Store != "", ""))
	if lc.Store == "redis" {
		add("limits min_replicas_ack", strconv.Itoa(lc.MinReplicasAck), source(lc.MinReplicasAck != 0, ""))
		timeout := time.Duration(lc.ReplicaAckTimeout)
		if timeout == 0 {
			timeout = idempotency.DefaultReplicaAckTimeout
		}
		add("limits replica_ack_timeout", timeout.String(), source(lc.ReplicaAckTimeout != 0, ""))
		add("limits key_prefix", lc.keyPrefix(serverID), source(lc.KeyPrefix != "", ""))
	}
	onErr := lc.OnStoreError
	if onErr == "" {
		onErr = limits.OnStoreErrorLocal
	}
	add("limits on_store_error", onErr, source(lc.OnStoreError != "", ""))
	maxKeys := lc.MaxKeys
	if maxKeys == 0 {
		maxKeys = limits.DefaultMaxKeys
	}
	add("limits max_keys", strconv.Itoa(maxKeys), source(lc.MaxKeys != 0, ""))
}
