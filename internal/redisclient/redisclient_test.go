package redisclient

import (
	"strings"
	"testing"
)

// TestRedisURLErrorRedacted: a Redis URL refused at start is printed by
// the one redaction (no user name, no password, query values REDACTED) and
// the library's text carries no password. The old rule kept the user name
// and the values of query parameters other than passwords.
func TestRedisURLErrorRedacted(t *testing.T) {
	for _, c := range []struct{ mode, url string }{
		{ModeSingle, "redis://alice:pw-1@127.0.0.1:6379/notanumber?token=qtok"},
		{ModeSentinel, "redis://alice:pw-1@127.0.0.1:26379/0?token=qtok"}, // no master_name
		{ModeCluster, "redis://alice:pw-1@127.0.0.1:7000/3?token=qtok"},
		{"bogus-mode", "redis://alice:pw-1@127.0.0.1:6379/0?token=qtok"},
	} {
		_, _, err := New("idempotency", Options{Mode: c.mode, URL: c.url})
		if err == nil {
			t.Errorf("%s %s: accepted", c.mode, c.url)
			continue
		}
		for _, secret := range []string{"alice", "pw-1", "qtok"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: error %q shows %q", c.mode, err, secret)
			}
		}
	}
}
