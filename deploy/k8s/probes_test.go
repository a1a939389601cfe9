package k8s_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// freeLoopbackPort returns a loopback port nothing listens on (now).
func freeLoopbackPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestSidecarServesProbes runs the built sidecar on the rendered base's
// Caddyfile (listen addresses and agent moved to free loopback ports,
// nothing else changed) with the JWKS and the agent down, as a pod's sidecar
// is at its start, and checks what the kubelet, Studio and Prometheus would
// see: the probe paths of the Deployment are answered by the sidecar (live
// 200, ready 503 waiting for the JWKS and the agent card), the gate is in
// front of everything else, and the metrics site serves the module's
// metrics on the PodMonitor's path, on its own port only.
func TestSidecarServesProbes(t *testing.T) {
	b := newRendered(t, "base", render(t, "base"))
	sc := b.sidecar
	cf := b.caddyCM.Data[caddyfileKey]
	port := freeLoopbackPort(t)
	mport := freeLoopbackPort(t)
	agentPort := freeLoopbackPort(t) // closed: the agent is down
	for old, repl := range map[string]string{
		// Same site address form (plain HTTP), bound to loopback only.
		":" + strconv.Itoa(sidecarPort) + " {": ":" + strconv.Itoa(port) + " {\n\tbind 127.0.0.1",
		":" + strconv.Itoa(metricsPort) + " {": ":" + strconv.Itoa(mport) + " {\n\tbind 127.0.0.1",
		agentLoopAddr:                          "127.0.0.1:" + strconv.Itoa(agentPort),
	} {
		if !strings.Contains(cf, old) {
			t.Fatalf("base Caddyfile has no %q", old)
		}
		cf = strings.ReplaceAll(cf, old, repl)
	}
	file := writeTemp(t, "Caddyfile", cf)

	cmd := exec.Command(sidecarBinary(t), containerArgv(t, sc)[1:]...)
	// The Deployment's args name the mounted path; run on the test's copy.
	for i, a := range cmd.Args {
		if a == caddyfileDir+"/"+caddyfileKey {
			cmd.Args[i] = file
		}
	}
	cmd.Env = adaptEnv(t)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sidecar output:\n%s", logs.String())
		}
	})

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string, hdr ...string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	// Startup: the startupProbe path answers 200 (the agent is not needed).
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, last := get(sc.StartupProbe.HTTPGet.Path)
		if code == http.StatusOK {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("sidecar exited at start (%v):\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sidecar %s never answered 200; last answer: %d %s", sc.StartupProbe.HTTPGet.Path, code, last)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if code, body := get(sc.LivenessProbe.HTTPGet.Path); code != http.StatusOK {
		t.Errorf("liveness %s: %d %s, want 200", sc.LivenessProbe.HTTPGet.Path, code, body)
	}
	code, body := get(sc.ReadinessProbe.HTTPGet.Path)
	if code != http.StatusServiceUnavailable {
		t.Errorf("readiness %s with the JWKS and the agent down: %d %s, want 503", sc.ReadinessProbe.HTTPGet.Path, code, body)
	}
	var ready struct {
		Ready      bool     `json:"ready"`
		WaitingFor []string `json:"waiting_for"`
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil {
		t.Errorf("readiness body %q: %v", body, err)
	}
	if ready.Ready || !slices.Contains(ready.WaitingFor, "jwks") || !slices.Contains(ready.WaitingFor, "agent_card:my_agent") {
		t.Errorf("readiness = %+v, want not ready, waiting for jwks and agent_card:my_agent", ready)
	}

	// The gate is in front: no key, no entry; unknown paths are 404; a
	// public route goes to the (down) agent.
	for _, c := range []struct {
		path string
		hdr  []string
		want int
	}{
		{"/a2a/events", nil, http.StatusUnauthorized},
		{"/a2a/events", []string{"X-API-Key", "wrong"}, http.StatusUnauthorized},
		{"/admin", []string{"X-API-Key", "test"}, http.StatusNotFound},
		{"/.well-known/health", nil, http.StatusBadGateway},
	} {
		if code, body := get(c.path, c.hdr...); code != c.want {
			t.Errorf("GET %s %v: %d %s, want %d", c.path, c.hdr, code, body, c.want)
		}
	}

	// Metrics: on the metrics site's path, with the module's collectors
	// (the decisions above counted), and nowhere else.
	mbase := "http://127.0.0.1:" + strconv.Itoa(mport)
	if code, body := getURL(client, mbase+"/"); code != http.StatusNotFound {
		t.Errorf("metrics site GET /: %d %q, want 404 (metrics under %s only)", code, body, metricsPath)
	}
	if code, _ := get(metricsPath, "X-API-Key", "test"); code != http.StatusNotFound {
		t.Errorf("gate GET %s: %d, want 404 (metrics are not served on the gate's port)", metricsPath, code)
	}
	code, body = getURL(client, mbase+metricsPath)
	if code != http.StatusOK {
		t.Fatalf("metrics site GET %s: %d %s", metricsPath, code, body)
	}
	for _, want := range []string{
		`supervaizer_sidecar_decisions_total{code="api_key_missing",outcome="deny",route="`,
		"supervaizer_sidecar_jwks_seconds_since_last_good_refresh -1",
		"supervaizer_sidecar_jwks_refresh_total{reason=\"unreachable\",result=\"error\"}",
		"supervaizer_sidecar_registration_fetch_total{result=\"error\"}",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics: no %q in\n%s", want, body)
		}
	}

	// The access log carries no credential.
	_, _ = get("/a2a/events", "X-API-Key", "test-key-in-log", "X-Supervaize-Workspace-Authorization", "Bearer token-in-log")
	// Wait for the access line of that request (bounded).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) &&
		!strings.Contains(logs.String(), `"uri":"/a2a/events"`); {
		time.Sleep(20 * time.Millisecond)
	}
	out := logs.String()
	if !strings.Contains(out, `"logger":"http.log.access`) {
		t.Errorf("no access log line in the sidecar output")
	}
	for _, secret := range []string{"test-key-in-log", "token-in-log"} {
		if strings.Contains(out, secret) {
			t.Errorf("the sidecar logged a credential (%s):\n%s", secret, out)
		}
	}
}

// getURL GETs an absolute URL: status and body (0 and the error on failure).
func getURL(client *http.Client, url string) (int, string) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// lockedBuffer is a bytes.Buffer safe for the child process's writer
// goroutine and the test reading it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
