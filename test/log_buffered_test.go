package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// bufferedAuditLog is a global `log` block sending the gate's audit lines
// (and only them) to path through the buffered writer.
func bufferedAuditLog(path, interval string) string {
	return fmt.Sprintf("\tlog audit {\n\t\toutput buffered {\n\t\t\tflush_interval %s\n\t\t\tsize 64KiB\n\t\t\toutput file %s\n\t\t}\n\t\tformat json\n\t\tinclude http.handlers.supervaizer_auth\n\t}\n", interval, path)
}

// decisionLines counts the audit lines in the file at path.
func decisionLines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), `"supervaizer decision"`)
}

// denyN sends n calls without a transport key (each refused with 401, each
// an audit line) and checks the agent received none.
func denyN(t *testing.T, sc *sidecar, ag *agent, n int) {
	t.Helper()
	body := actionFor(t, "job.sync")
	for range n {
		if r := do(t, http.MethodPost, sc.base+"/a2a", body, "Content-Type", "application/json"); r.Status != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", r.Status)
		}
	}
	nothingReached(t, ag)
}

// TestBufferedLogWriterFlushesOnInterval: with `output buffered`, every
// audit line reaches the file within the flush interval.
func TestBufferedLogWriterFlushesOnInterval(t *testing.T) {
	ag := startAgent(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	sc, err := runCaddyfile(t, bufferedAuditLog(path, "100ms"), func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n", port, localDirective(""), ag.addr())
	})
	if err != nil {
		t.Fatal(err)
	}
	denyN(t, sc, ag, 40)
	eventually(t, 10*time.Second, "the 40 audit lines in the file (flush_interval 100ms)", func() bool {
		return decisionLines(path) >= 40
	}, func() string { return fmt.Sprintf("%d of 40 audit lines in the file", decisionLines(path)) })
}

// TestBufferedLogWriterFlushesOnExit: lines held in the buffer (an hour's
// interval, a buffer far from full) are not in the file yet, and all of
// them are once the process exits gracefully on SIGTERM.
func TestBufferedLogWriterFlushesOnExit(t *testing.T) {
	ag := startAgent(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	port := freePort(t)
	cf := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tauto_https off\n%s}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
		bufferedAuditLog(path, "1h"), port, localDirective(""), ag.addr())
	cfPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfPath, []byte(cf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, cfPath, port)
	denyN(t, &sidecar{base: p.base}, ag, 25)
	if n := decisionLines(path); n != 0 {
		t.Fatalf("%d audit lines written before a flush; want them still buffered", n)
	}
	p.terminate()
	if n := decisionLines(path); n != 25 {
		t.Fatalf("%d audit lines in the file after SIGTERM, want 25\n%s", n, p.logs.String())
	}
}

// TestBufferedLogWriterCaddyfileErrors: the writer refuses what it cannot
// honour, naming the setting.
func TestBufferedLogWriterCaddyfileErrors(t *testing.T) {
	for _, c := range []struct{ block, want string }{
		{"output buffered {\n\t\t\tflush_interval 1s\n\t\t}", "output <writer> is required"},
		{"output buffered {\n\t\t\tsize 0\n\t\t\toutput stderr\n\t\t}", "size"},
		{"output buffered {\n\t\t\tflush_interval -1s\n\t\t\toutput stderr\n\t\t}", "flush_interval"},
		{"output buffered {\n\t\t\tcolour red\n\t\t\toutput stderr\n\t\t}", `unrecognized buffered writer subdirective "colour"`},
		{"output buffered {\n\t\t\tflush_interval 1ns\n\t\t\toutput stderr\n\t\t}", "flush_interval: a duration of at least 10ms"},
		{"output buffered {\n\t\t\toutput stderr\n\t\t\toutput stdout\n\t\t}", "output given twice"},
	} {
		cf := fmt.Sprintf("{\n\tadmin off\n\tlog audit {\n\t\t%s\n\t}\n}\nhttp://127.0.0.1:1 {\n\trespond ok\n}\n", c.block)
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%q: error %v, want one containing %q", c.block, err, c.want)
		}
	}
}

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
