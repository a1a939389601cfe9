// The bounds of every numeric setting and the invariants between settings:
// one table (settingBounds) and one function (Handler.validate) that both
// front doors go through. The Caddyfile parser (caddyfile.go) only reads
// syntax into the JSON fields; a Caddyfile and the equivalent JSON config
// are refused or accepted identically (README, "Directive reference",
// lists each bound).

package caddymodule

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
)

// unit is how a bounded setting's value is read and printed.
type unit int

const (
	unitDuration unit = iota // nanoseconds (caddy.Duration)
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

	"workspace_auth leeway":                    {unit: unitDuration, max: int64(maxLeeway)},
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

	"idempotency ttl":                       {unit: unitDuration, max: int64(7 * day)},
	"idempotency lock_ttl":                  {unit: unitDuration, max: int64(day)},
	"idempotency wait_timeout":              {unit: unitDuration, max: int64(10 * time.Minute)},
	"idempotency upstream_timeout":          {unit: unitDuration, max: int64(time.Hour)},
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

// maxLeeway is the largest clock skew tolerance: past it, an expired token
// is no longer meaningfully expired.
const maxLeeway = 5 * time.Minute

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

// boundedValues lists h's bounded settings with their values, in the
// names of settingBounds (a test holds the two lists equal).
func (h *Handler) boundedValues() []boundedValue {
	wa := h.workspaceAuth()
	vs := []boundedValue{
		{"max_body", h.MaxBody}, {"max_body_a2a", h.MaxBodyA2A}, {"max_body_data", h.MaxBodyData},
		{"body_memory", h.BodyMemory}, {"body_timeout", int64(h.BodyTimeout)},
		{"workspace_auth jwks_refresh", int64(wa.JWKSRefresh)},
		{"workspace_auth jwks_unknown_kid_interval", int64(wa.JWKSUnknownKIDInterval)},
		{"workspace_auth jwks_timeout", int64(wa.JWKSTimeout)},
		{"workspace_auth jwks_max_stale", int64(wa.JWKSMaxStale)},
		{"workspace_auth max_token_lifetime", int64(wa.MaxTokenLifetime)},
		{"workspace_auth cache_size", int64(wa.CacheSize)},
		{"registration refresh", int64(h.registration().Refresh)},
	}
	if wa.Leeway != nil {
		vs = append(vs, boundedValue{"workspace_auth leeway", int64(*wa.Leeway)})
	}
	if ic := wa.Introspection; ic != nil {
		vs = append(vs, boundedValue{"workspace_auth introspection timeout", int64(ic.Timeout)},
			boundedValue{"workspace_auth introspection cache_ttl", int64(ic.CacheTTL)},
			boundedValue{"workspace_auth introspection negative_cache_ttl", int64(ic.NegativeCacheTTL)},
			boundedValue{"workspace_auth introspection cache_size", int64(ic.CacheSize)})
	}
	if ic := h.Idempotency; ic != nil {
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
	if lc := h.Limits; lc != nil {
		vs = append(vs, boundedValue{"limits replica_ack_timeout", int64(lc.ReplicaAckTimeout)},
			boundedValue{"limits min_replicas_ack", int64(lc.MinReplicasAck)})
	}
	return vs
}

// checkBounds returns the problems of h's bounded settings, each naming
// its setting.
func (h *Handler) checkBounds() []error {
	var errs []error
	for _, bv := range h.boundedValues() {
		if err := settingBounds[bv.name].check(bv.name, bv.v); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// checkInvariants returns the problems between settings, each naming both:
// the body memory budget below the /a2a bound, a key given twice, an empty
// agent slug, a blank server id, and the idempotency invariants
// (idempotencyInvariants).
func (h *Handler) checkInvariants() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	// On the effective values, defaults included: a max_body_a2a over the
	// default budget, body_memory not set, would answer every call over
	// the budget a retryable 503 forever.
	if a2a, bm := h.resolvedMaxBodyA2A(), h.resolvedBodyMemory(); bm < a2a {
		what := humanize.IBytes(uint64(bm))
		if h.BodyMemory == 0 {
			what += ", the default"
		}
		bad("body_memory (%s) must be at least max_body_a2a (%s): a call at the bound could never be held; set body_memory",
			what, humanize.IBytes(uint64(a2a)))
	}
	seen := map[string]int{}
	for i, k := range h.APIKeys {
		if j, dup := seen[k.Key]; dup && k.Key != "" {
			bad("api_key %s is given twice (api_key %d and %d): one line per key, with its scope", fingerprint(k.Key), j+1, i+1)
		}
		seen[k.Key] = i
	}
	for slug := range h.Agents {
		if strings.TrimSpace(slug) == "" {
			bad("agents: an agent slug must not be empty")
		}
	}
	if h.ServerID != "" && strings.TrimSpace(h.ServerID) != h.ServerID {
		bad("server_id %q must not be blank or have surrounding spaces", h.ServerID)
	}
	if ic := h.Idempotency; ic != nil && ic.Store != "off" {
		errs = append(errs, idempotencyInvariants(ic)...)
	}
	return errs
}

// idempotencyInvariants are the idempotency block's rules between
// settings, each checked by its owner (idempotency/validate.go): the
// guard's durations (ttl at least lock_ttl, lock_ttl above
// upstream_timeout), each per-workspace share at most its total, and the
// store-specific settings only with their store (max_entries and
// max_entries_per_workspace are refused with store redis, which has no
// entry count).
func idempotencyInvariants(ic *IdempotencyConfig) []error {
	var errs []error
	add := func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				errs = append(errs, fmt.Errorf("supervaizer_auth: idempotency %w", e))
			}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("supervaizer_auth: idempotency %w", err))
		}
	}
	add(idempotency.Options{TTL: time.Duration(ic.TTL), LockTTL: time.Duration(ic.LockTTL),
		UpstreamTimeout: time.Duration(ic.UpstreamTimeout)}.Validate())
	add(memoryLimits(ic).Validate())
	var set []string
	for name, given := range map[string]bool{
		"redis_url": ic.RedisURL != "", "redis_mode": ic.RedisMode != "",
		"min_replicas_ack": ic.MinReplicasAck != 0, "replica_ack_timeout": ic.ReplicaAckTimeout != 0,
		"key_prefix": ic.KeyPrefix != "", "file_path": ic.FilePath != "",
		"max_entries": ic.MaxEntries != 0, "max_entries_per_workspace": ic.MaxEntriesPerWorkspace != 0,
	} {
		if given {
			set = append(set, name)
		}
	}
	slices.Sort(set) // one order from one config
	for _, err := range idempotency.CheckStoreSettings(ic.Store, set) {
		add(err)
	}
	return errs
}

// resolvedBodyMemory is the body memory budget in effect: body_memory, else
// its default.
func (h *Handler) resolvedBodyMemory() int64 {
	if h.BodyMemory > 0 {
		return h.BodyMemory
	}
	return gate.DefaultBodyMemory
}

// resolvedMaxBodyA2A is the /a2a body bound in effect: max_body_a2a, else
// max_body, else its default.
func (h *Handler) resolvedMaxBodyA2A() int64 {
	switch {
	case h.MaxBodyA2A > 0:
		return h.MaxBodyA2A
	case h.MaxBody > 0:
		return h.MaxBody
	}
	return defaultMaxBodyA2A
}
