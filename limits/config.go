// The limits configuration as plain values: its rules, where rate state
// lives, and the checks and conversions every front door shares (docs/limits.md,
// "Fair sharing of an agent: limits"). The limits block of config.Config
// maps onto Config (config/limits.go); config.Config.Validate
// (config/validate.go) runs Validate; Provision builds the State and
// Limiter from Rules, Identity and Redis.

package limits

import (
	"fmt"
	"strconv"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/redisclient"
)

// Kinds of the store of rate state.
const (
	StoreMemory = "memory"
	StoreRedis  = "redis"
)

// Config is one limits block. Zero values are the defaults.
type Config struct {
	// Rate are the rate rules.
	Rate []RateConfig
	// Concurrency are the concurrency rules.
	Concurrency []ConcurrencyConfig
	// Store is StoreMemory (default, "") or StoreRedis.
	Store string
	// RedisURL is the Redis address (required with StoreRedis).
	RedisURL string
	// RedisMode is single (default), sentinel or cluster (internal/redisclient).
	RedisMode string
	// MinReplicasAck is the replicas that must acknowledge each update.
	MinReplicasAck int
	// ReplicaAckTimeout bounds each such WAIT (default
	// redisclient.DefaultReplicaAckTimeout).
	ReplicaAckTimeout time.Duration
	// KeyPrefix of every Redis key (default DefaultKeyPrefix<server_id>:).
	KeyPrefix string
	// OnStoreError is OnStoreErrorLocal (default) or OnStoreErrorDeny.
	OnStoreError string
	// MaxKeys bounds the tracked keys of each pool (default DefaultMaxKeys).
	MaxKeys int
}

// RateConfig is one rate rule as written: target patterns, "<n>/<unit>"
// and the burst (0: n).
type RateConfig struct {
	Targets []string
	Rate    string
	Burst   int
}

// ConcurrencyConfig is one concurrency rule as written: target patterns
// and the calls in flight allowed.
type ConcurrencyConfig struct {
	Targets []string
	Max     int
}

// Rules builds c's rules, rate rules first; every problem is named
// ("limits rate: ...").
func (c *Config) Rules() ([]*Rule, []error) {
	var rules []*Rule
	var errs []error
	for _, r := range c.Rate {
		rule, err := NewRateRule(r.Targets, r.Rate, r.Burst)
		if err != nil {
			errs = append(errs, fmt.Errorf("limits rate: %w", err))
			continue
		}
		rules = append(rules, rule)
	}
	for _, cr := range c.Concurrency {
		rule, err := NewConcurrencyRule(cr.Targets, cr.Max)
		if err != nil {
			errs = append(errs, fmt.Errorf("limits concurrency: %w", err))
			continue
		}
		rules = append(rules, rule)
	}
	return rules, errs
}

// Validate returns every problem of c, each naming its setting ("limits
// <setting> ..."): a bad rule, an unknown store, redis_mode or
// on_store_error, a Redis setting with the memory store, store redis
// without a URL, max_keys out of range, a block without rules, a rule
// given twice (duplicateRules). The ranges
// of min_replicas_ack and replica_ack_timeout are in config.Config's table
// (config/config.go).
func (c *Config) Validate() []error {
	rules, errs := c.Rules()
	errs = append(errs, duplicateRules(rules)...)
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("limits "+format, args...)) }
	switch c.Store {
	case "", StoreMemory:
		for _, set := range c.redisSettingsSet() {
			bad("%s is a setting of the Redis store only (store redis <url>); this block's store is memory", set)
		}
	case StoreRedis:
		if c.RedisURL == "" {
			bad("store redis needs a URL: store redis <url> (JSON redis_url)")
		}
	default:
		bad("store must be memory or redis, not %q", c.Store)
	}
	switch c.RedisMode {
	case "", redisclient.ModeSingle, redisclient.ModeSentinel, redisclient.ModeCluster:
	default:
		bad("redis_mode must be single, sentinel or cluster, not %q", c.RedisMode)
	}
	switch c.OnStoreError {
	case "", OnStoreErrorLocal, OnStoreErrorDeny:
	default:
		bad("on_store_error must be local or deny, not %q", c.OnStoreError)
	}
	if c.MaxKeys < 0 || c.MaxKeys > MaxMaxKeys {
		bad("max_keys must be from 1 to %d, not %d", MaxMaxKeys, c.MaxKeys)
	}
	if len(c.Rate)+len(c.Concurrency) == 0 {
		bad("block has no rate or concurrency rule")
	}
	return errs
}

// duplicateRules refuses two rules of one text (after normalization:
// "rate job.start 5/m" is "rate job.start 5/m burst 5"): a rule's budget
// belongs to its text (state.go keys it so), so both would draw on one
// bucket or pool and each call would be charged once per copy.
func duplicateRules(rules []*Rule) []error {
	var errs []error
	seen := map[string]bool{}
	for _, r := range rules {
		if seen[r.text] {
			errs = append(errs, fmt.Errorf("limits %s: rule %q is given twice: both would draw on one budget, charging each call twice; give it once",
				r.Kind, r.text))
		}
		seen[r.text] = true
	}
	return errs
}

// redisSettingsSet names the Redis-only settings c sets.
func (c *Config) redisSettingsSet() []string {
	var set []string
	for _, s := range []struct {
		name string
		on   bool
	}{
		{"redis_url", c.RedisURL != ""}, {"redis_mode", c.RedisMode != ""},
		{"min_replicas_ack", c.MinReplicasAck != 0}, {"replica_ack_timeout", c.ReplicaAckTimeout != 0},
		{"key_prefix", c.KeyPrefix != ""},
	} {
		if s.on {
			set = append(set, s.name)
		}
	}
	return set
}

// EffectiveKeyPrefix is the Redis key prefix in effect: KeyPrefix, else
// DefaultKeyPrefix<serverID>:.
func (c *Config) EffectiveKeyPrefix(serverID string) string {
	if c.KeyPrefix != "" {
		return c.KeyPrefix
	}
	return DefaultKeyPrefix + serverID + ":"
}

// EffectiveRedisMode is the Redis mode in effect (default single).
func (c *Config) EffectiveRedisMode() string {
	if c.RedisMode == "" {
		return redisclient.ModeSingle
	}
	return c.RedisMode
}

// EffectiveReplicaAckTimeout is the WAIT bound in effect.
func (c *Config) EffectiveReplicaAckTimeout() time.Duration {
	if c.ReplicaAckTimeout == 0 {
		return redisclient.DefaultReplicaAckTimeout
	}
	return c.ReplicaAckTimeout
}

// EffectiveOnStoreError is on_store_error in effect (default local).
func (c *Config) EffectiveOnStoreError() string {
	if c.OnStoreError == "" {
		return OnStoreErrorLocal
	}
	return c.OnStoreError
}

// EffectiveMaxKeys is max_keys in effect (default DefaultMaxKeys).
func (c *Config) EffectiveMaxKeys() int {
	if c.MaxKeys == 0 {
		return DefaultMaxKeys
	}
	return c.MaxKeys
}

// Redis is the shared store's options for serverID (nil with the memory
// store) and the identity of the State it needs: two configs of one
// identity share one State across reloads.
func (c *Config) Redis(serverID string) (ro *RedisOptions, identity string) {
	if c.Store != StoreRedis {
		return nil, "memory|" + serverID
	}
	prefix := c.EffectiveKeyPrefix(serverID)
	ro = &RedisOptions{Mode: c.RedisMode, URL: c.RedisURL, KeyPrefix: prefix,
		MinReplicasAck: c.MinReplicasAck, ReplicaAckTimeout: c.ReplicaAckTimeout}
	return ro, "redis|" + c.RedisMode + "|" + c.RedisURL + "|" + prefix + "|" +
		strconv.Itoa(c.MinReplicasAck) + "|" + c.ReplicaAckTimeout.String()
}
