package idempotency

import (
	"strings"
	"testing"
	"time"
)

// TestOptionsValidate: the guard's durations are checked on the values in
// effect (defaults included), each problem naming both settings.
func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		want []string // substrings of the error; none: valid
	}{
		{"defaults", Options{}, nil},
		{"ttl equal to lock_ttl", Options{TTL: time.Minute, LockTTL: time.Minute, UpstreamTimeout: time.Second}, nil},
		{"ttl below the default lock_ttl", Options{TTL: time.Minute},
			[]string{"ttl (1m0s) must be at least lock_ttl (2m0s)"}},
		{"lock_ttl below the default upstream_timeout", Options{LockTTL: 30 * time.Second},
			[]string{"lock_ttl (30s) must be longer than upstream_timeout (1m0s)"}},
		{"lock_ttl equal to upstream_timeout", Options{LockTTL: time.Minute, UpstreamTimeout: time.Minute},
			[]string{"lock_ttl (1m0s) must be longer than upstream_timeout (1m0s)"}},
		{"both", Options{TTL: time.Second, LockTTL: 2 * time.Second, UpstreamTimeout: 3 * time.Second},
			[]string{"ttl (1s) must be at least lock_ttl (2s)", "lock_ttl (2s) must be longer than upstream_timeout (3s)"}},
		{"negative is the default", Options{TTL: -1, LockTTL: -1, UpstreamTimeout: -1}, nil},
	} {
		err := c.o.Validate()
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want nil", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: nil, want %q", c.name, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q", c.name, err, w)
			}
		}
	}
}

// TestMemoryOptionsValidate: a per-workspace share set above its total is
// refused, naming both settings; a default share of 0 (a total below 8)
// is refused, naming the settings; defaults otherwise always fit.
func TestMemoryOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o    MemoryOptions
		want string
	}{
		{MemoryOptions{}, ""},
		{MemoryOptions{MaxEntries: 100, MaxEntriesPerGroup: 100}, ""},
		{MemoryOptions{MaxEntries: 100, MaxEntriesPerGroup: 101}, "max_entries_per_workspace (101) must be at most max_entries (100)"},
		{MemoryOptions{MaxEntriesPerGroup: DefaultMemoryMaxEntries + 1}, "must be at most max_entries (10000)"},
		{MemoryOptions{MaxBytesPerGroup: 65 << 20}, "max_bytes_per_workspace (65 MiB) must be at most max_bytes (64 MiB)"},
		{MemoryOptions{MaxBytes: 1 << 10}, ""}, // the default share is MaxBytes/8
		{MemoryOptions{MaxEntries: 8, MaxBytes: 8}, ""},
		{MemoryOptions{MaxEntries: 7}, "max_entries (7) must be at least 8, or max_entries_per_workspace set: a workspace's default share is max_entries/8"},
		{MemoryOptions{MaxEntries: 7, MaxEntriesPerGroup: 7}, ""},
		{MemoryOptions{MaxBytes: 7}, "max_bytes (7 B) must be at least 8 B, or max_bytes_per_workspace set"},
		{MemoryOptions{MaxBytes: 7, MaxBytesPerGroup: 1}, ""},
	} {
		err := c.o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want nil", c.o, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}

// TestCheckStoreSettings: a store-specific setting is refused with another
// store, naming the setting and its stores; the bounds and shares apply to
// every store (Redis enforces the shares).
func TestCheckStoreSettings(t *testing.T) {
	for _, c := range []struct {
		store string
		set   []string
		want  []string
	}{
		{"", []string{"max_entries", "max_entries_per_workspace", "max_bytes"}, nil},
		{StoreFile, []string{"file_path", "max_entries"}, nil},
		{StoreRedis, []string{"redis_url", "redis_mode", "min_replicas_ack", "replica_ack_timeout", "key_prefix", "max_bytes_per_workspace"}, nil},
		{"", []string{"redis_url"}, []string{"redis_url applies to store redis only, not to store memory"}},
		{StoreMemory, []string{"file_path"}, []string{"file_path applies to store file only, not to store memory"}},
		{StoreRedis, []string{"max_entries", "max_entries_per_workspace", "max_bytes"}, nil},
	} {
		errs := CheckStoreSettings(c.store, c.set)
		if len(errs) != len(c.want) {
			t.Errorf("%q %v: %v, want %q", c.store, c.set, errs, c.want)
			continue
		}
		for i, err := range errs {
			if err.Error() != c.want[i] {
				t.Errorf("%q %v: %v, want %q", c.store, c.set, err, c.want[i])
			}
		}
	}
}
