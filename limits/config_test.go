package limits_test

import (
	"strings"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/limits"
)

// TestConfigValidate: each problem of a limits block is refused naming its
// setting; a good block is accepted and its rules built in order.
func TestConfigValidate(t *testing.T) {
	rate := []limits.RateConfig{{Targets: []string{"job.start"}, Rate: "10/m"}}
	for want, c := range map[string]limits.Config{
		"limits block has no rate or concurrency rule": {},
		"limits rate":                                            {Rate: []limits.RateConfig{{Targets: []string{"job.start"}, Rate: "10/d"}}},
		"limits concurrency":                                     {Concurrency: []limits.ConcurrencyConfig{{Targets: []string{"x"}, Max: 0}}},
		"limits store must be memory or redis":                   {Rate: rate, Store: "disk"},
		"limits store redis needs a URL":                         {Rate: rate, Store: limits.StoreRedis},
		"limits key_prefix is a setting of the Redis store only": {Rate: rate, KeyPrefix: "p:"},
		"limits redis_mode":                                      {Rate: rate, Store: limits.StoreRedis, RedisURL: "redis://h", RedisMode: "ring"},
		"limits on_store_error":                                  {Rate: rate, OnStoreError: "retry"},
		"limits max_keys":                                        {Rate: rate, MaxKeys: limits.MaxMaxKeys + 1},
		`limits rate: rule "rate job.start 10/m burst 10" is given twice`: {Rate: append(rate,
			limits.RateConfig{Targets: []string{"job.start"}, Rate: "10/m", Burst: 10})},
		`limits concurrency: rule "concurrency job.* 2" is given twice`: {Concurrency: []limits.ConcurrencyConfig{
			{Targets: []string{"job.*"}, Max: 2}, {Targets: []string{"job.*"}, Max: 2}}},
	} {
		errs := c.Validate()
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), want) {
			t.Errorf("%s: %v", want, errs)
		}
	}
	good := limits.Config{Rate: rate, Concurrency: []limits.ConcurrencyConfig{{Targets: []string{"job.*"}, Max: 2}}}
	if errs := good.Validate(); len(errs) != 0 {
		t.Fatalf("good block refused: %v", errs)
	}
	rules, _ := good.Rules()
	if len(rules) != 2 || rules[0].Kind != limits.KindRate || rules[1].Kind != limits.KindConcurrency {
		t.Errorf("rules %v", rules)
	}
}

// TestConfigRedisIdentity: two configs share a State exactly when their
// store settings are the same; the default key prefix is per server.
func TestConfigRedisIdentity(t *testing.T) {
	mem := limits.Config{}
	if ro, id := mem.Redis("s1"); ro != nil || id != "memory|s1" {
		t.Errorf("memory: %v %q", ro, id)
	}
	r := limits.Config{Store: limits.StoreRedis, RedisURL: "redis://h:6379/0"}
	ro, id1 := r.Redis("s1")
	if ro == nil || ro.KeyPrefix != limits.DefaultKeyPrefix+"s1:" {
		t.Fatalf("redis options %+v", ro)
	}
	_, id2 := r.Redis("s2")
	r.ReplicaAckTimeout = time.Second
	_, id3 := r.Redis("s1")
	if id1 == id2 || id1 == id3 {
		t.Errorf("identities not distinct: %q %q %q", id1, id2, id3)
	}
}
