// The limits block as the limits package's own configuration, whose
// Validate, Rules and effective values are the block's (limits/config.go).

package config

import "github.com/supervaize/supervaizer-sidecar/limits"

// Domain is lc as a limits.Config (nil when lc is).
func (lc *LimitsConfig) Domain() *limits.Config {
	if lc == nil {
		return nil
	}
	c := &limits.Config{Store: lc.Store, RedisURL: lc.RedisURL, RedisMode: lc.RedisMode,
		MinReplicasAck: lc.MinReplicasAck, ReplicaAckTimeout: lc.ReplicaAckTimeout.D(),
		KeyPrefix: lc.KeyPrefix, OnStoreError: lc.OnStoreError, MaxKeys: lc.MaxKeys}
	for _, r := range lc.Rate {
		c.Rate = append(c.Rate, limits.RateConfig{Targets: r.Targets, Rate: r.Rate, Burst: r.Burst})
	}
	for _, r := range lc.Concurrency {
		c.Concurrency = append(c.Concurrency, limits.ConcurrencyConfig{Targets: r.Targets, Max: r.Max})
	}
	return c
}
