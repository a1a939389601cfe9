// The rules between the idempotency settings, checked where they are
// owned: the guard's durations (Options.Validate), the memory and file
// stores' bounds (MemoryOptions.Validate), and which settings apply to
// which store (CheckStoreSettings). Each problem names its settings as the
// gate's idempotency block does (docs/directives.md, "Directive reference"); the caller
// adds its own context.

package idempotency

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// Store kinds, as the gate's idempotency block names them.
const (
	StoreMemory = "memory" // MemoryStore (the default)
	StoreFile   = "file"   // FileStore
	StoreRedis  = "redis"  // RedisStore
)

// Validate returns the problems between o's durations, on the values in
// effect (a zero or negative duration is its default, as New reads it),
// joined: ttl shorter than lock_ttl (a record expiring before its key's
// in-flight mark would let the key run twice) and lock_ttl not longer than
// upstream_timeout (a slow call would outlive its mark and could run
// twice). nil when they hold.
func (o Options) Validate() error {
	ttl, lock, up := orDefault(o.TTL, DefaultTTL), orDefault(o.LockTTL, DefaultLockTTL),
		orDefault(o.UpstreamTimeout, DefaultUpstreamTimeout)
	var errs []error
	if ttl < lock {
		errs = append(errs, fmt.Errorf("ttl (%s) must be at least lock_ttl (%s): a record expiring before its key's mark would let the key run twice", ttl, lock))
	}
	if lock <= up {
		errs = append(errs, fmt.Errorf("lock_ttl (%s) must be longer than upstream_timeout (%s), or a slow call could run twice", lock, up))
	}
	return errors.Join(errs...)
}

// Validate returns the problems of o's bounds, on the values in effect
// (Resolved), joined: a per-workspace share set above its total
// (max_entries_per_workspace above max_entries, max_bytes_per_workspace
// above max_bytes), and a share left at its default (the total divided by
// DefaultGroupShare, rounded down) that comes to 0: with max_entries or
// max_bytes below 8 no workspace could use the store, so the share must
// then be given. nil when they hold.
func (o MemoryOptions) Validate() error {
	l := o.Resolved()
	var errs []error
	if o.MaxEntriesPerGroup > 0 && l.MaxEntriesPerGroup > l.MaxEntries {
		errs = append(errs, fmt.Errorf("max_entries_per_workspace (%d) must be at most max_entries (%d)", l.MaxEntriesPerGroup, l.MaxEntries))
	}
	if l.MaxEntriesPerGroup <= 0 {
		errs = append(errs, fmt.Errorf("max_entries (%d) must be at least %d, or max_entries_per_workspace set: "+
			"a workspace's default share is max_entries/%d", l.MaxEntries, DefaultGroupShare, DefaultGroupShare))
	}
	if o.MaxBytesPerGroup > 0 && l.MaxBytesPerGroup > l.MaxBytes {
		errs = append(errs, fmt.Errorf("max_bytes_per_workspace (%s) must be at most max_bytes (%s)",
			humanize.IBytes(uint64(l.MaxBytesPerGroup)), humanize.IBytes(uint64(l.MaxBytes))))
	}
	if l.MaxBytesPerGroup <= 0 {
		errs = append(errs, fmt.Errorf("max_bytes (%d B) must be at least %d B, or max_bytes_per_workspace set: "+
			"a workspace's default share is max_bytes/%d", l.MaxBytes, DefaultGroupShare, DefaultGroupShare))
	}
	return errors.Join(errs...)
}

// storeSettings are the settings that apply to some stores only, with
// those stores. The bounds (max_entries, max_bytes and their per-workspace
// shares) apply to every store: the memory and file stores enforce the
// totals and the shares, a RedisStore the shares (Redis's maxmemory is
// its total; max_entries and max_bytes set the shares' defaults there).
var storeSettings = map[string][]string{
	"redis_url":           {StoreRedis},
	"redis_mode":          {StoreRedis},
	"min_replicas_ack":    {StoreRedis},
	"replica_ack_timeout": {StoreRedis},
	"key_prefix":          {StoreRedis},
	"file_path":           {StoreFile},
}

// CheckStoreSettings returns a problem for each setting of set (the names
// of the settings given, e.g. "redis_url") that does not apply to store
// ("" is StoreMemory), in the order of set. A setting that applies to
// every store is never a problem.
func CheckStoreSettings(store string, set []string) []error {
	if store == "" {
		store = StoreMemory
	}
	var errs []error
	for _, name := range set {
		stores, specific := storeSettings[name]
		if specific && !slices.Contains(stores, store) {
			errs = append(errs, fmt.Errorf("%s applies to store %s only, not to store %s", name, strings.Join(stores, " and "), store))
		}
	}
	return errs
}

// orDefault is d, or def when d is zero or negative.
func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
