package test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestBufferedLogWriterJSONSizeBounded: the Caddyfile refuses a buffer over
// 1GiB (`size: a size in bytes between 1 and 1GiB`), but the JSON config
// ("size": 1099511627776, 1 TiB) is accepted by Provision/Validate; the first
// log line then makes zap allocate the whole buffer (bufio.NewWriterSize), an
// out-of-memory crash of the gate instead of a refused config (`run` dies
// with "fatal error: runtime: out of memory" on the provision warnings,
// `caddy validate` too, and `supervaizer check` says OK).
func TestBufferedLogWriterJSONSizeBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	cfg := fmt.Sprintf(`{"admin":{"disabled":true},"logging":{"logs":{"audit":{"include":["http.handlers.supervaizer_auth"],`+
		`"writer":{"output":"buffered","size":1099511627776,"writer":{"output":"file","filename":%q}}}}}}`, path)
	var c caddy.Config
	if err := caddy.StrictUnmarshalJSON([]byte(cfg), &c); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&c); err == nil {
		t.Fatal(`JSON "size": 1099511627776 (1 TiB) accepted; the Caddyfile refuses more than 1GiB`)
	}
}
