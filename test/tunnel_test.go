package test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The tunnel attacks of issue 13: a request that would turn the exchange
// into a byte tunnel around the gate (CONNECT, extended CONNECT, Upgrade),
// over every HTTP version, on a route with a key (/api/supervaizer/…, the
// write key) and on a route with none (other_routes public). Each is
// refused with 400 {"detail":"Protocol upgrades are not supported"} and the
// agent — which would switch protocols if asked — receives nothing.

const upgradeRefusal = "Protocol upgrades are not supported"

// tunnelTargets are the two ways in the issue found: the legacy route with
// the write key, and any path without a key under other_routes public.
var tunnelTargets = []struct {
	path string
	key  []string // header pairs
}{
	{"/api/supervaizer/ws", []string{"X-API-Key", testKey}},
	{"/anything", nil},
}

// tunnelAgent starts an agent that accepts any protocol switch (101 to an
// Upgrade, then silence) as a WebSocket agent would, so a request the gate
// let through would open the tunnel.
func tunnelAgent(t *testing.T) *agent {
	ag := startAgent(t)
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.Header.Get("Upgrade") == "" {
			w.WriteHeader(200)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		brw.ReadByte() // hold the tunnel open until the peer goes
	}
	return ag
}

// TestTunnelRefusedEveryVersion: every form of CONNECT and upgrade, over
// HTTP/1.1 (raw bytes), HTTP/2 over TLS and h2c (raw frames) and HTTP/3
// (quic-go's client, whose server always advertises extended CONNECT).
// Go's HTTP/2 server refuses a :protocol itself unless the process runs
// with GODEBUG=http2xconnect=1 (see TestTunnelRefusedWithExtendedConnectOn).
func TestTunnelRefusedEveryVersion(t *testing.T) {
	ag := tunnelAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startEveryProtocol(t, ag.addr(), jwksDirective(jw.url(), "\t\tother_routes public\n"))
	host := hostPort(ps.base)

	t.Run("HTTP/1.1", func(t *testing.T) {
		for _, tc := range []struct{ name, raw string }{
			{"CONNECT authority-form", "CONNECT " + host + " HTTP/1.1\r\nHost: " + host + "\r\nX-API-Key: " + testKey + "\r\n\r\n"},
			{"CONNECT legacy path", "CONNECT /api/supervaizer/ws HTTP/1.1\r\nHost: " + host + "\r\nX-API-Key: " + testKey + "\r\n\r\n"},
			{"CONNECT public other path", "CONNECT /anything HTTP/1.1\r\nHost: " + host + "\r\n\r\n"},
			{"connect in lower case", "connect /anything HTTP/1.1\r\nHost: " + host + "\r\n\r\n"},
			{"Upgrade legacy path", "GET /api/supervaizer/ws HTTP/1.1\r\nHost: " + host + "\r\nX-API-Key: " + testKey +
				"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"},
			{"Upgrade public other path", "GET /anything HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"},
		} {
			if st := rawExchange(t, ps.base, tc.raw, 0, ""); !strings.HasPrefix(st, "HTTP/1.1 400") {
				t.Errorf("%s: %q, want 400", tc.name, st)
			}
		}
		nothingReached(t, ag)
	})
	for _, site := range []struct {
		name, base, scheme string
		tls                bool
	}{{"HTTP/2 over TLS", ps.tlsBase, "https", true}, {"h2c", ps.base, "http", false}} {
		t.Run(site.name, func(t *testing.T) {
			conf := ps.tlsConfig()
			if !site.tls {
				conf = nil
			}
			authority := hostPort(site.base)
			out := h2Raw(t, authority, conf, ":method", "CONNECT", ":authority", authority, "x-api-key", testKey)
			if out.status != "400" || !bytes.Contains(out.body, []byte(upgradeRefusal)) {
				t.Errorf("CONNECT: %+v, want 400", out)
			}
			for _, tg := range tunnelTargets {
				fields := []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", site.scheme, ":path", tg.path,
					":authority", authority, "sec-websocket-version", "13"}
				out := h2Raw(t, authority, conf, append(fields, lower(tg.key)...)...)
				// Refused by Go's HTTP/2 server (stream reset) when extended
				// CONNECT is off; by the gate (400) when it is on.
				if out.connectProtocol && out.status != "400" || !out.connectProtocol && !out.reset && out.status != "400" {
					t.Errorf("extended CONNECT %s: %+v", tg.path, out)
				}
			}
			nothingReached(t, ag)
		})
	}
	t.Run("HTTP/3", func(t *testing.T) {
		v := ps.versions(t)[3]
		authority := hostPort(ps.tlsBase)
		plain := &http.Request{Method: "CONNECT", URL: &url.URL{Scheme: "https", Host: authority}, Host: authority,
			Proto: "HTTP/1.1", Header: http.Header{"X-Api-Key": {testKey}}}
		if st, body := h3Do(t, v, plain); st != 400 || !bytes.Contains(body, []byte(upgradeRefusal)) {
			t.Errorf("CONNECT: %d %s", st, body)
		}
		for _, tg := range tunnelTargets {
			req, _ := http.NewRequest("CONNECT", ps.tlsBase+tg.path, nil)
			req.Proto = "websocket" // quic-go's extended CONNECT: :protocol websocket
			req.Header.Set("Sec-WebSocket-Version", "13")
			for i := 0; i+1 < len(tg.key); i += 2 {
				req.Header.Set(tg.key[i], tg.key[i+1])
			}
			if st, body := h3Do(t, v, req); st != 400 || !bytes.Contains(body, []byte(upgradeRefusal)) {
				t.Errorf("extended CONNECT %s: %d %s", tg.path, st, body)
			}
		}
		nothingReached(t, ag)
	})
	logs := ps.logs(t)
	for _, code := range []string{`"code":"connect"`, `"code":"extended_connect"`, `"code":"upgrade"`} {
		if !strings.Contains(logs, code) {
			t.Errorf("no audit line with %s", code)
		}
	}
}

// TestTunnelRefusedWithExtendedConnectOn: the sidecar's binary (this test
// binary re-executed as Caddy's main, see cliExecEnv) run with
// GODEBUG=http2xconnect=1, so Go's HTTP/2 server advertises extended
// CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL) and hands a :protocol request
// to the handler: the gate refuses it (400) over TLS and h2c, on both ways
// in, and the agent receives nothing.
func TestTunnelRefusedWithExtendedConnectOn(t *testing.T) {
	ag := tunnelAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startSidecarProcess(t, "http2xconnect=1", ag.addr(), jwksDirective(jw.url(), "\t\tother_routes public\n"))

	for _, site := range []struct {
		base, scheme string
		tls          bool
	}{{ps.tlsBase, "https", true}, {ps.base, "http", false}} {
		conf := ps.tlsConfig()
		if !site.tls {
			conf = nil
		}
		authority := hostPort(site.base)
		for _, tg := range tunnelTargets {
			fields := []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", site.scheme, ":path", tg.path,
				":authority", authority, "sec-websocket-version", "13"}
			out := h2Raw(t, authority, conf, append(fields, lower(tg.key)...)...)
			if !out.connectProtocol {
				t.Fatalf("%s: the server does not advertise extended CONNECT: GODEBUG not applied?", site.scheme)
			}
			if out.status != "400" || !bytes.Contains(out.body, []byte(upgradeRefusal)) {
				t.Errorf("%s extended CONNECT %s: %+v, want 400", site.scheme, tg.path, out)
			}
		}
	}
	nothingReached(t, ag)
	if logs := ps.logs(t); !strings.Contains(logs, `"code":"extended_connect"`) {
		t.Errorf("no extended_connect audit line:\n%s", logs)
	}
}

// startSidecarProcess runs everyProtocolCaddyfile in a child process: this
// test binary as the sidecar's binary (cliExecEnv) with godebug added to
// GODEBUG (read once, at start, by Go's HTTP/2 servers). The child is
// killed at the end of the test.
func startSidecarProcess(t *testing.T, godebug, upstream, directiveBody string) *protoSidecar {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tlsPort, plainPort := freeTCPUDPPort(t), freePort(t)
	logPath := filepath.Join(dir, "caddy.log")
	cfg := filepath.Join(dir, "Caddyfile")
	writeFile(t, cfg, everyProtocolCaddyfile(logPath, tlsPort, plainPort, upstream, directiveBody))
	cmd := exec.Command(bin, "run", "--config", cfg, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), cliExecEnv+"=1", "GODEBUG="+strings.Trim(os.Getenv("GODEBUG")+","+godebug, ","))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("sidecar process output:\n%s", out.String())
		}
	})
	ps := &protoSidecar{sidecar: &sidecar{base: fmt.Sprintf("http://127.0.0.1:%d", plainPort), logPath: logPath},
		tlsBase: fmt.Sprintf("https://127.0.0.1:%d", tlsPort)}
	ps.waitServing(t)
	return ps
}

// lower returns header pairs with lower-case names, as HTTP/2 requires.
func lower(pairs []string) []string {
	out := append([]string(nil), pairs...)
	for i := 0; i < len(out); i += 2 {
		out[i] = strings.ToLower(out[i])
	}
	return out
}

// TestUpgradeRefused: a protocol upgrade is refused on every route, so a 101
// from the agent can never open a tunnel around the gate.
func TestUpgradeRefused(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective("		other_routes public\n"))
	for _, path := range []string{"/.well-known/health", "/.well-known/agents.json", "/a2a/events", "/anything"} {
		for _, h := range [][]string{
			{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
			{"Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAAQAAP__"},
		} {
			r := do(t, "GET", sc.base+path, nil, append(h, "X-API-Key", testKey)...)
			if r.Status != 400 {
				t.Errorf("%s with Upgrade %s: %d", path, h[3], r.Status)
			}
		}
	}
	nothingReached(t, ag)
}
