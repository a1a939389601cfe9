// The bounds of every numeric setting: one table (settingBounds), checked
// by Config.Validate (config.go) for both front doors. docs/directives.md, "Directive
// reference", lists each bound.

package gate

import (
	"fmt"
	"time"

	"github.com/dustin/go-humanize"
)

// unit is how a bounded setting's value is read and printed.
type unit int

const (
	unitDuration unit = iota // nanoseconds
	unitBytes                // bytes
	unitCount                // a plain number (entries, replicas)
)

// bound is the range of one numeric setting. A zero value is the setting's
// default (JSON 0 or absent) and is not checked, except where the setting
// says otherwise (leeway: 0 is none); a negative value is always refused.
type bound struct {
	unit     unit
	min, max int64 // min applies to a set (non-zero) value; 0: no minimum
}

const (
	day = 24 * time.Hour
	gib = int64(1) << 30
)

// settingBounds is every bounded setting, by the name the README and the
// errors give it (the block, then the setting).
var settingBounds = map[string]bound{
	"max_body":      {unit: unitBytes, max: gib},
	"max_body_a2a":  {unit: unitBytes, max: gib},
	"max_body_data": {unit: unitBytes, max: gib},
	"body_memory":   {unit: unitBytes, max: 64 * gib},
	"body_timeout":  {unit: unitDuration, min: int64(time.Second), max: int64(10 * time.Minute)},

	"workspace_auth leeway":                    {unit: unitDuration, max: int64(MaxLeeway)},
	"workspace_auth jwks_refresh":              {unit: unitDuration, min: int64(minRefresh), max: int64(day)},
	"workspace_auth jwks_unknown_kid_interval": {unit: unitDuration, min: int64(10 * time.Millisecond), max: int64(time.Hour)},
	"workspace_auth jwks_timeout":              {unit: unitDuration, max: int64(time.Minute)},
	"workspace_auth jwks_max_stale":            {unit: unitDuration, max: int64(30 * day)},
	"workspace_auth max_token_lifetime":        {unit: unitDuration, max: int64(30 * day)},
	"workspace_auth cache_size":                {unit: unitCount, max: 10_000_000},

	"workspace_auth introspection timeout":            {unit: unitDuration, max: int64(time.Minute)},
	"workspace_auth introspection cache_ttl":          {unit: unitDuration, max: int64(time.Hour)},
	"workspace_auth introspection negative_cache_ttl": {unit: unitDuration, max: int64(time.Hour)},
	"workspace_auth introspection cache_size":         {unit: unitCount, max: 10_000_000},

	"registration refresh": {unit: unitDuration, min: int64(minRefresh), max: int64(day)},

	// The guard's durations: below a second, "one forward per key within
	// lock_ttl" is worth nothing and every covered call times out.
	"idempotency ttl":                       {unit: unitDuration, min: int64(time.Second), max: int64(7 * day)},
	"idempotency lock_ttl":                  {unit: unitDuration, min: int64(time.Second), max: int64(day)},
	"idempotency wait_timeout":              {unit: unitDuration, min: int64(time.Second), max: int64(10 * time.Minute)},
	"idempotency upstream_timeout":          {unit: unitDuration, min: int64(time.Second), max: int64(time.Hour)},
	"idempotency replica_ack_timeout":       {unit: unitDuration, max: int64(time.Minute)},
	"idempotency min_replicas_ack":          {unit: unitCount, max: 16},
	"idempotency max_entries":               {unit: unitCount, max: 10_000_000},
	"idempotency max_entries_per_workspace": {unit: unitCount, max: 10_000_000},
	"idempotency max_bytes":                 {unit: unitBytes, max: 64 * gib},
	"idempotency max_bytes_per_workspace":   {unit: unitBytes, max: 64 * gib},
	"idempotency max_record_bytes":          {unit: unitBytes, max: gib},

	"limits replica_ack_timeout": {unit: unitDuration, max: int64(time.Minute)},
	"limits min_replicas_ack":    {unit: unitCount, max: 16},
}

// minRefresh is the shortest period of a background refresh (JWKS, agent
// cards): a shorter one is a fetch loop, not a refresh.
const minRefresh = time.Second

// MaxLeeway is the largest clock skew tolerance: past it, an expired token
// is no longer meaningfully expired.
const MaxLeeway = 5 * time.Minute

// check returns the problem of value v of the setting name ("" if none).
func (b bound) check(name string, v int64) error {
	switch {
	case v < 0:
		return fmt.Errorf("supervaizer_auth: %s must not be negative, not %s", name, b.format(v))
	case v != 0 && v < b.min:
		return fmt.Errorf("supervaizer_auth: %s must be at least %s, not %s", name, b.format(b.min), b.format(v))
	case v > b.max:
		return fmt.Errorf("supervaizer_auth: %s must be at most %s, not %s", name, b.format(b.max), b.format(v))
	}
	return nil
}

// format prints v in b's unit.
func (b bound) format(v int64) string {
	switch b.unit {
	case unitDuration:
		return time.Duration(v).String()
	case unitBytes:
		if v < 0 {
			return fmt.Sprint(v)
		}
		return humanize.IBytes(uint64(v))
	}
	return fmt.Sprint(v)
}

// boundedValue is one bounded setting of a config and its value.
type boundedValue struct {
	name string
	v    int64
}

// boundedValues lists c's bounded settings with their values, in the
// names of settingBounds (a test holds the two lists equal).
func (c *Config) boundedValues() []boundedValue {
	wa := c.Auth
	vs := []boundedValue{
		{"max_body", c.MaxBody}, {"max_body_a2a", c.MaxBodyA2A}, {"max_body_data", c.MaxBodyData},
		{"body_memory", c.BodyMemory}, {"body_timeout", int64(c.BodyTimeout)},
		{"workspace_auth jwks_refresh", int64(wa.JWKSRefresh)},
		{"workspace_auth jwks_unknown_kid_interval", int64(wa.JWKSUnknownKIDInterval)},
		{"workspace_auth jwks_timeout", int64(wa.JWKSTimeout)},
		{"workspace_auth jwks_max_stale", int64(wa.JWKSMaxStale)},
		{"workspace_auth max_token_lifetime", int64(wa.MaxTokenLifetime)},
		{"workspace_auth cache_size", int64(wa.CacheSize)},
		{"registration refresh", int64(c.RegistrationRefresh)},
	}
	if wa.Leeway != nil {
		vs = append(vs, boundedValue{"workspace_auth leeway", int64(*wa.Leeway)})
	}
	if ib := wa.Introspection; ib != nil {
		vs = append(vs, boundedValue{"workspace_auth introspection timeout", int64(ib.Timeout)},
			boundedValue{"workspace_auth introspection cache_ttl", int64(ib.CacheTTL)},
			boundedValue{"workspace_auth introspection negative_cache_ttl", int64(ib.NegativeCacheTTL)},
			boundedValue{"workspace_auth introspection cache_size", int64(ib.CacheSize)})
	}
	if ic := c.Idempotency; ic != nil {
		vs = append(vs, boundedValue{"idempotency ttl", int64(ic.TTL)},
			boundedValue{"idempotency lock_ttl", int64(ic.LockTTL)},
			boundedValue{"idempotency wait_timeout", int64(ic.WaitTimeout)},
			boundedValue{"idempotency upstream_timeout", int64(ic.UpstreamTimeout)},
			boundedValue{"idempotency replica_ack_timeout", int64(ic.ReplicaAckTimeout)},
			boundedValue{"idempotency min_replicas_ack", int64(ic.MinReplicasAck)},
			boundedValue{"idempotency max_entries", int64(ic.MaxEntries)},
			boundedValue{"idempotency max_entries_per_workspace", int64(ic.MaxEntriesPerWorkspace)},
			boundedValue{"idempotency max_bytes", ic.MaxBytes},
			boundedValue{"idempotency max_bytes_per_workspace", ic.MaxBytesPerWorkspace},
			boundedValue{"idempotency max_record_bytes", ic.MaxRecordBytes})
	}
	if lc := c.Limits; lc != nil {
		vs = append(vs, boundedValue{"limits replica_ack_timeout", int64(lc.ReplicaAckTimeout)},
			boundedValue{"limits min_replicas_ack", int64(lc.MinReplicasAck)})
	}
	return vs
}

// checkBounds returns the problems of c's bounded settings, each naming
// its setting.
func (c *Config) checkBounds() []error {
	var errs []error
	for _, bv := range c.boundedValues() {
		if err := settingBounds[bv.name].check(bv.name, bv.v); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
