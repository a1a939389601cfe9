package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestBufferedLogWriterJSONSizeBounded (found by the newcomer review; now
// refused by Validate, as is a flush_interval under 10ms): the Caddyfile refuses a buffer over
// 1GiB (`size: a size in bytes between 1 and 1GiB`), but the JSON config
// ("size": 1099511627776, 1 TiB) is accepted by Provision/Validate; the first
// log line then makes zap allocate the whole buffer (bufio.NewWriterSize), an
// out-of-memory crash of the gate instead of a refused config (`run` dies
// with "fatal error: runtime: out of memory" on the provision warnings,
// `caddy validate` too, and `supervaizer check` says OK).
func TestBufferedLogWriterJSONSizeBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	for _, c := range []struct{ setting, want string }{
		{`"size":1099511627776`, "size must be between 1 and"},
		{`"flush_interval":1`, "flush_interval must be at least 10ms"},
	} {
		cfg := fmt.Sprintf(`{"admin":{"disabled":true},"logging":{"logs":{"audit":{"include":["http.handlers.supervaizer_auth"],`+
			`"writer":{"output":"buffered",%s,"writer":{"output":"file","filename":%q}}}}}}`, c.setting, path)
		var conf caddy.Config
		if err := caddy.StrictUnmarshalJSON([]byte(cfg), &conf); err != nil {
			t.Fatal(err)
		}
		if err := caddy.Validate(&conf); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("JSON %s: error %v, want one containing %q", c.setting, err, c.want)
		}
	}
}

// TestBufferedLogWriterExitKeepsLastLines: docs/logging.md promises that a
// graceful exit writes every buffer, but the buffers are flushed in a
// caddy.OnExit hook and Caddy logs after its exit hooks ("shutdown complete",
// with exit_code): with the default log sent through `output buffered`
// those last lines stay in the buffer and are lost on every SIGTERM. A plain
// `output file` writer has them.
func TestBufferedLogWriterExitKeepsLastLines(t *testing.T) {
	ag := startAgent(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "caddy.log")
	port := freePort(t)
	cf := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tauto_https off\n\tlog {\n\t\toutput buffered {\n\t\t\tflush_interval 1h\n\t\t\toutput file %s\n\t\t}\n\t\tformat json\n\t}\n}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
		path, port, localDirective(""), ag.addr())
	cfPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfPath, []byte(cf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, cfPath, port)
	p.terminate()
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"shutdown complete"`) {
		t.Fatalf("the log file lacks Caddy's last line (\"shutdown complete\") after SIGTERM:\n%s", b)
	}
}
