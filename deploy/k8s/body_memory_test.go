package k8s_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/config"
)

// Body memory sizing (deploy/k8s/README.md, "Memory"): Caddy sets GOMEMLIMIT
// to 90 % of the container's memory limit (automemlimit); a held /a2a body
// costs up to about five times its size at peak with idempotency (the body,
// its buffer's growth, what the envelope parse and the fingerprint take
// beside it, garbage not yet collected: TestBodyMemoryUnderLoad
// measures it); the rest of the process (Caddy, the gate, the
// proxy's buffers, the Go runtime) stays under processBaseline.
const (
	goMemLimitRatio = 0.9
	bodyPeakFactor  = 5
	processBaseline = 64 << 20
)

// baseBodyBounds is the base's sidecar memory limit and the body_memory
// and max_body_a2a of its adapted Caddyfile (the defaults when unset).
func baseBodyBounds(t *testing.T) (limit, budget, a2a int64) {
	t.Helper()
	r := newRendered(t, "base", render(t, "base"))
	q, ok := r.sidecar.Resources.Limits["memory"]
	if !ok {
		t.Fatal("base: the sidecar has no memory limit")
	}
	file := writeTemp(t, "Caddyfile", r.caddyCM.Data[caddyfileKey])
	cfg, err := adapt(t, file, false, adaptEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	budget, a2a = config.DefaultBodyMemory, config.DefaultMaxBodyA2A // when the Caddyfile sets none
	for _, h := range handlers(cfg) {
		if h["handler"] != "supervaizer_auth" {
			continue
		}
		if v, ok := h["body_memory"].(float64); ok {
			budget = int64(v)
		}
		if v, ok := h["max_body_a2a"].(float64); ok {
			a2a = int64(v)
		}
	}
	return q.Value(), budget, a2a
}

// TestBodyMemoryAgreesWithContainerLimit: the base's body_memory and its
// sidecar memory limit are set together: the budget holds at least one
// /a2a body at its bound, and the budget at its peak cost plus the
// process's baseline fits under the GOMEMLIMIT Caddy derives from the
// limit.
func TestBodyMemoryAgreesWithContainerLimit(t *testing.T) {
	limit, budget, a2a := baseBodyBounds(t)
	if budget < a2a {
		t.Errorf("body_memory %d is below max_body_a2a %d", budget, a2a)
	}
	if need, have := bodyPeakFactor*budget+processBaseline, int64(goMemLimitRatio*float64(limit)); need > have {
		t.Errorf("body_memory %d MiB: %d MiB at peak with the baseline, over the GOMEMLIMIT of the %d MiB limit (%d MiB): lower body_memory or raise the limit",
			budget>>20, need>>20, limit>>20, have>>20)
	}
}

// TestBodyMemoryUnderLoad: 40 concurrent /a2a job.start calls of 14 MiB,
// each with its own idempotency_key (the idempotency path fingerprints the
// input and records the answer), against the real binary run with the
// base's body_memory and the GOMEMLIMIT Caddy derives from the base's
// memory limit, to an agent that answers at once (so held bodies are
// replaced as fast as they arrive, the peak of the process): every call
// is answered, either by the agent (it received the whole body) or with
// the retryable refusal (HTTP 503, Retry-After, data.code server_busy,
// the agent received nothing); the process's peak RSS stays under the
// container limit.
// bodyShapes are the bodies TestBodyMemoryUnderLoad sends: the bulk of
// each in the action's input (fingerprinted: job.start is covered) or among
// the members of params (compared under case folding: jsonrpc's read
// objects). Keys are where the checks keep something per item (the
// duplicate-key check, the fingerprint's sorted members), so a body of
// short keys is the costliest shape of a given size: the shortest distinct
// keys there are (short_keys) make the most of them, past the three
// quarters of a power of two (1.63 M) where the key table doubled.
var bodyShapes = []struct {
	name string
	body func(t *testing.T, size int) []byte
}{
	{"one_long_string", bigActionBody},
	{"input_many_keys", func(t *testing.T, size int) []byte { return keysActionBody(t, size, false) }},
	{"params_many_keys", func(t *testing.T, size int) []byte { return keysActionBody(t, size, true) }},
	{"input_escaped_keys", func(t *testing.T, size int) []byte { return keysActionBodyWith(t, size, false, `\\`) }},
	{"input_short_keys", func(t *testing.T, size int) []byte { return shortKeysActionBody(t, size, false) }},
	{"params_short_keys", func(t *testing.T, size int) []byte { return shortKeysActionBody(t, size, true) }},
}

// TestBodyMemoryUnderLoad sends 40 concurrent 14 MiB job.start calls of
// each shape to the binary with the base's body_memory and GOMEMLIMIT: each
// call is either forwarded whole or refused server_busy (or, for a body the
// gate refuses on its own, answered by it), the agent receives nothing else,
// and the process's peak RSS stays under the container's limit.
func TestBodyMemoryUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary with 560 MiB of request bodies per shape")
	}
	for _, shape := range bodyShapes {
		t.Run(shape.name, func(t *testing.T) { bodyMemoryUnderLoad(t, shape.body) })
	}
}

func bodyMemoryUnderLoad(t *testing.T, makeBody func(t *testing.T, size int) []byte) {
	limit, budget, _ := baseBodyBounds(t)
	const calls, size = 40, 14 << 20

	var received, reached atomic.Int32
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		n, _ := io.Copy(io.Discard, r.Body)
		if n == size {
			received.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":7,"result":{"status":"ok"}}`)
	}))
	defer agent.Close()

	base, pid := startLoadSidecar(t, strings.TrimPrefix(agent.URL, "http://"), budget, int64(goMemLimitRatio*float64(limit)))
	body := makeBody(t, size)
	if len(body) != size {
		t.Fatalf("body of %d bytes, want %d", len(body), size)
	}
	// Each call's idempotency_key is its own (same length): the head up to
	// the key is copied per call, the 14 MiB rest is shared.
	cut := bytes.Index(body, []byte(`"idem_1"`)) + len(`"idem_1"`)
	if cut < len(`"idem_1"`) {
		t.Fatal("the body has no idempotency_key")
	}

	type answer struct {
		status int
		retry  string
		body   []byte
		err    error
	}
	answers := make(chan answer, calls)
	for i := range calls {
		head := bytes.Replace(bytes.Clone(body[:cut]), []byte(`"idem_1"`), fmt.Appendf(nil, `"i%05d"`, i), 1)
		go func() {
			req, _ := http.NewRequest("POST", base+"/a2a", io.MultiReader(bytes.NewReader(head), bytes.NewReader(body[cut:])))
			req.ContentLength = int64(len(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-API-Key", loadKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{status: resp.StatusCode, retry: resp.Header.Get("Retry-After"), body: b}
		}()
	}
	var ok, busy int
	timeout := time.After(90 * time.Second)
	for range calls {
		var a answer
		select {
		case a = <-answers:
		case <-timeout:
			t.Fatalf("%d answered, %d refused; %d calls unanswered after 90 s", ok, busy, calls-ok-busy)
		}
		switch {
		case a.err != nil:
			t.Errorf("a call got no answer: %v", a.err)
		case a.status == http.StatusOK:
			ok++
			if !bytes.Contains(a.body, []byte(`"status":"ok"`)) {
				t.Errorf("not the agent's answer: %.200s", a.body)
			}
		case a.status == http.StatusServiceUnavailable:
			busy++
			var rpc struct {
				ID    json.RawMessage `json:"id"`
				Error struct {
					Data struct {
						Code string `json:"code"`
					} `json:"data"`
				} `json:"error"`
			}
			if json.Unmarshal(a.body, &rpc) != nil || rpc.Error.Data.Code != "server_busy" || string(rpc.ID) != "null" || a.retry == "" {
				t.Errorf("refusal is not the retryable server_busy answer: Retry-After %q, %s", a.retry, a.body)
			}
		default:
			t.Errorf("status %d: %.200s", a.status, a.body)
		}
	}
	if ok == 0 || ok+busy != calls || int(reached.Load()) != ok || int(received.Load()) != ok {
		t.Errorf("%d answered by the agent, %d refused, %d reached the agent (%d whole); want every call one or the other, the agent reached by the answered ones only",
			ok, busy, reached.Load(), received.Load())
	}
	if hwm := peakRSS(t, pid); hwm >= limit {
		t.Errorf("peak RSS %d MiB, over the container limit %d MiB (%d answered, %d refused)", hwm>>20, limit>>20, ok, busy)
	} else {
		t.Logf("peak RSS %d MiB (limit %d MiB, body_memory %d MiB; %d answered, %d refused)", hwm>>20, limit>>20, budget>>20, ok, busy)
	}
}

const loadKey = "load-test-key"

// startLoadSidecar runs the built binary in local mode in front of agent,
// with the memory idempotency store (its default),
// with body_memory budget and GOMEMLIMIT memLimit, and returns its base URL
// and pid once it serves.
func startLoadSidecar(t *testing.T, agent string, budget, memLimit int64) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cf := fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
}

:%d {
	bind 127.0.0.1
	supervaizer_auth {
		server_id load-srv
		api_key %s
		local_mode on
		agent agent_interviewer
		registration off
		body_memory %d
	}
	reverse_proxy %s
}
`, port, loadKey, budget, agent)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(cf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sidecarBinary(t), "run", "--config", cfgPath, "--adapter", "caddyfile")
	var env []string // adaptEnv's private dirs, without its token-mode settings: local mode here
	for _, kv := range adaptEnv(t) {
		if !strings.HasPrefix(kv, "SUPERVAIZER_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "GOMEMLIMIT="+strconv.FormatInt(memLimit, 10))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("sidecar output (end):\n%s", out.String()[max(0, out.Len()-4000):])
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitFor(t, "the sidecar to serve", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/_sidecar/live")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base, cmd.Process.Pid
}

// bigActionBody is the fixture's job.start (examples/request.json) of exactly size bytes, its input
// carrying an inline file.
func bigActionBody(t *testing.T, size int) []byte {
	t.Helper()
	head := `{"jsonrpc":"2.0","id":7,"method":"supervaizer/action.invoke","params":{"action_request":{` +
		`"request_id":"req_1","actor":{"user_id":"u"},"workspace":{"id":"ws_1","slug":"acme"},"mission_id":"m_1",` +
		`"agent_slug":"agent_interviewer","draft_session_id":"draft_1","job_id":"job_1","idempotency_key":"idem_1",` +
		`"surface":"job.start","action":"job.start","input":{"file":"`
	tail := `"}}}}`
	pad := size - len(head) - len(tail)
	if pad <= 0 {
		t.Fatal("size too small")
	}
	return []byte(head + strings.Repeat("x", pad) + tail)
}

// peakRSS is the process's peak resident set (VmHWM of /proc/<pid>/status).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// waitFor polls cond every 20 ms until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keysActionBody is bigActionBody's call of exactly size bytes whose bulk is
// distinct five-character keys with the value 0 (ten bytes a member): in
// the action's input, or, with inParams, among the members of params
// after action_request.
func keysActionBody(t *testing.T, size int, inParams bool) []byte {
	t.Helper()
	return keysActionBodyWith(t, size, inParams, "")
}

// keysActionBodyWith is keysActionBody with prefix (JSON string text, an
// escape for instance) before each key's five characters: a key with an
// escape is kept unescaped beside the body by the duplicate-key check and
// the fingerprint.
func keysActionBodyWith(t *testing.T, size int, inParams bool, prefix string) []byte {
	t.Helper()
	key := []byte(`"` + prefix + `00000":0,`)
	return keysActionBodyOf(t, size, inParams, func(b []byte, i int) []byte {
		if i >= 36*36*36*36*36 {
			t.Fatal("size out of range")
		}
		for j, v := len(prefix)+5, i; j > len(prefix); j, v = j-1, v/36 {
			key[j] = "0123456789abcdefghijklmnopqrstuvwxyz"[v%36]
		}
		return append(b, key...)
	})
}

// shortKeysActionBody is keysActionBody with the shortest distinct keys:
// three characters, then four, of the 67 printable ASCII characters that
// are neither a capital letter (no two keys equal under case folding), a
// quote nor a backslash ("pad" left out).
func shortKeysActionBody(t *testing.T, size int, inParams bool) []byte {
	t.Helper()
	var alpha []byte
	for c := byte(' '); c < 0x7f; c++ {
		if c != '"' && c != '\\' && (c < 'A' || c > 'Z') {
			alpha = append(alpha, c)
		}
	}
	a := len(alpha)
	return keysActionBodyOf(t, size, inParams, func(b []byte, i int) []byte {
		if i >= a*a*a+a*a*a*a {
			t.Fatal("size out of range")
		}
		n, l := i, 3
		if n >= a*a*a {
			n, l = n-a*a*a, 4
		}
		k := len(b)
		b = append(b, '"')
		for range l {
			b, n = append(b, alpha[n%a]), n/a
		}
		if string(b[k:]) == `"pad` {
			return b[:k]
		}
		return append(b, `":0,`...)
	})
}

// keysActionBodyOf is bigActionBody's call of exactly size bytes whose bulk
// is the members appendMember appends (the i-th each time, with its comma,
// at most 10 bytes), in the action's input, or, with inParams, among the
// members of params after action_request.
func keysActionBodyOf(t *testing.T, size int, inParams bool, appendMember func(b []byte, i int) []byte) []byte {
	t.Helper()
	request := `"action_request":{"request_id":"req_1","actor":{"user_id":"u"},"workspace":{"id":"ws_1","slug":"acme"},` +
		`"mission_id":"m_1","agent_slug":"agent_interviewer","draft_session_id":"draft_1","job_id":"job_1",` +
		`"idempotency_key":"idem_1","surface":"job.start","action":"job.start","input":{`
	head := `{"jsonrpc":"2.0","id":7,"method":"supervaizer/action.invoke","params":{` + request
	tail := `"pad":""}}}}`
	if inParams {
		head += `"file":"f"}},`
		tail = `"pad":""}}`
	}
	if size < len(head)+len(tail) {
		t.Fatal("size too small")
	}
	b := make([]byte, 0, size+16)
	b = append(b, head...)
	for i := 0; ; i++ {
		n := len(b)
		if b = appendMember(b, i); len(b)+len(tail) > size {
			b = b[:n]
			break
		}
	}
	pad := size - len(b) - len(tail)
	padAt := strings.Index(tail, `"pad":""`) + len(`"pad":"`)
	b = append(b, tail[:padAt]...)
	b = append(b, strings.Repeat("x", pad)...)
	return append(b, tail[padAt:]...)
}
