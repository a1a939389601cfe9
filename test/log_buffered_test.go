package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	deadline := time.Now().Add(10 * time.Second)
	for decisionLines(path) < 40 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 40 audit lines in the file after 10s (flush_interval 100ms)", decisionLines(path))
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// terminate sends the process SIGTERM (a graceful exit: Caddy's exit hooks
// run) and waits up to 30s for it to end.
func (p *sidecarProcess) terminate() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("the process did not exit on SIGTERM:\n%s", p.logs.String())
	}
}
