package test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The harness for every HTTP version: one Caddy config with the same gate on
// two loopback sites, a TLS one (Caddy's internal CA; HTTP/1.1, HTTP/2 and
// HTTP/3 over UDP on the same port number) and a cleartext one (HTTP/1.1
// and h2c), and a client per HTTP version.

// protoSidecar is a running everyProtocol config.
type protoSidecar struct {
	*sidecar                // base: the cleartext site; logPath: Caddy's log
	tlsBase  string         // https://127.0.0.1:port (TCP and UDP)
	roots    *x509.CertPool // Caddy's internal root CA, read from its storage
}

// httpVersion is one way a client reaches the gate.
type httpVersion struct {
	name   string
	base   string       // the site it talks to
	proto  int          // the ProtoMajor every answer must come in
	client *http.Client // speaks only this version
}

// freeTCPUDPPort returns a loopback port number free for both TCP and UDP
// (HTTP/3 listens on UDP with the TLS site's port number).
func freeTCPUDPPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return 0
}

// everyProtocolCaddyfile is the whole Caddyfile: the tests' global options
// with an internal CA (local_certs, skip_install_trust: nothing installed
// on the machine) and every protocol on (servers { protocols h1 h2 h2c h3 }),
// then the TLS site on tlsPort and the cleartext site on plainPort, each
// running supervaizer_auth with directiveBody before reverse_proxy to
// upstream.
func everyProtocolCaddyfile(logPath string, tlsPort, plainPort int, upstream, directiveBody string) string {
	site := func(addr, tlsLine string) string {
		return fmt.Sprintf("%s {\n%s\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
			addr, tlsLine, directiveBody, upstream)
	}
	return fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https disable_redirects
	local_certs
	skip_install_trust
	storage file_system %s
	servers {
		protocols h1 h2 h2c h3
	}
	log {
		output file %s
		format json
		level INFO
	}
}
%s%s`, caddyStorage(), logPath, site(fmt.Sprintf("https://127.0.0.1:%d", tlsPort), "\ttls internal\n"),
		site(fmt.Sprintf("http://127.0.0.1:%d", plainPort), ""))
}

// startEveryProtocol runs everyProtocolCaddyfile in this process and
// returns once both sites answer over every version (the internal
// certificate is issued in the background).
func startEveryProtocol(t *testing.T, upstream, directiveBody string) *protoSidecar {
	t.Helper()
	tlsPort, plainPort := freeTCPUDPPort(t), freePort(t)
	logPath := filepath.Join(t.TempDir(), "caddy.log")
	sc, err := loadCaddyfile(t, everyProtocolCaddyfile(logPath, tlsPort, plainPort, upstream, directiveBody), plainPort, logPath)
	if err != nil {
		t.Fatalf("loading config: %v", err)
	}
	ps := &protoSidecar{sidecar: sc, tlsBase: fmt.Sprintf("https://127.0.0.1:%d", tlsPort)}
	ps.waitServing(t)
	return ps
}

// caddyStorage is the storage of the internal CA and its certificates:
// $XDG_DATA_HOME/caddy, under TestMain's temporary directory (named in the
// config: Caddy's default storage was fixed at init, before TestMain ran).
// Shared by the tests, so the CA is made once.
func caddyStorage() string { return filepath.Join(os.Getenv("XDG_DATA_HOME"), "caddy") }

// caddyRootCA reads the internal CA's root certificate from caddyStorage;
// nil until Caddy has written it.
func caddyRootCA() *x509.CertPool {
	b, err := os.ReadFile(filepath.Join(caddyStorage(), "pki", "authorities", "local", "root.crt"))
	if err != nil {
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil
	}
	return pool
}

// waitServing waits (15 s at most) until /_sidecar/live (answered by the
// sidecar, not the agent) is 200 over every version.
func (ps *protoSidecar) waitServing(t *testing.T) {
	t.Helper()
	last := ""
	eventually(t, 15*time.Second, "/_sidecar/live to answer 200 over every version", func() bool {
		last = "root CA not written yet"
		if ps.roots = caddyRootCA(); ps.roots != nil {
			last = ""
			for _, v := range ps.versions(t) {
				resp, err := v.client.Get(v.base + "/_sidecar/live")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != 200 || resp.ProtoMajor != v.proto {
						err = fmt.Errorf("status %d over HTTP/%d", resp.StatusCode, resp.ProtoMajor)
					}
				}
				if err != nil {
					last = v.name + ": " + err.Error()
					break
				}
			}
		}
		return last == ""
	}, func() string { return fmt.Sprintf("not serving every version: %s\nlogs:\n%s", last, ps.logs(t)) })
}

// tlsConfig trusts Caddy's internal root CA only.
func (ps *protoSidecar) tlsConfig(nextProtos ...string) *tls.Config {
	return &tls.Config{RootCAs: ps.roots, ServerName: "127.0.0.1", NextProtos: nextProtos}
}

// versions returns a client per HTTP version: HTTP/1.1 (cleartext site),
// HTTP/2 over TLS, h2c (prior knowledge, cleartext site) and HTTP/3 (QUIC,
// quic-go's client). Each client is closed at the end of the test.
func (ps *protoSidecar) versions(t *testing.T) []httpVersion {
	t.Helper()
	var h1, h2, h2c http.Protocols
	h1.SetHTTP1(true)
	h2.SetHTTP2(true)
	h2c.SetUnencryptedHTTP2(true)
	h1t := &http.Transport{Protocols: &h1}
	h2t := &http.Transport{Protocols: &h2, TLSClientConfig: ps.tlsConfig(), ForceAttemptHTTP2: true}
	h2ct := &http.Transport{Protocols: &h2c}
	h3t := &http3.Transport{TLSClientConfig: ps.tlsConfig()}
	t.Cleanup(func() {
		h1t.CloseIdleConnections()
		h2t.CloseIdleConnections()
		h2ct.CloseIdleConnections()
		h3t.Close()
	})
	c := func(rt http.RoundTripper) *http.Client { return &http.Client{Transport: rt, Timeout: 20 * time.Second} }
	return []httpVersion{
		{"HTTP/1.1", ps.base, 1, c(h1t)},
		{"HTTP/2 over TLS", ps.tlsBase, 2, c(h2t)},
		{"h2c", ps.base, 2, c(h2ct)},
		{"HTTP/3", ps.tlsBase, 3, c(h3t)},
	}
}

// forEachVersion runs test once per HTTP version (subtests named by it).
func (ps *protoSidecar) forEachVersion(t *testing.T, test func(t *testing.T, v httpVersion)) {
	for _, v := range ps.versions(t) {
		t.Run(v.name, func(t *testing.T) { test(t, v) })
	}
}

// do sends a request over v and checks the answer came in v's version.
func (v httpVersion) do(t *testing.T, method, path string, body []byte, headers ...string) response {
	t.Helper()
	r := doWith(t, v.client, method, v.base+path, body, headers...)
	if r.ProtoMajor != v.proto {
		t.Fatalf("%s %s: answer over HTTP/%d, want HTTP/%d", method, path, r.ProtoMajor, v.proto)
	}
	return r
}

// rpc posts body to /a2a over v with the write key and, if token != "", the token.
func (v httpVersion) rpc(t *testing.T, body []byte, token string, extra ...string) response {
	t.Helper()
	h := []string{"X-API-Key", testKey, "Content-Type", "application/json"}
	if token != "" {
		h = append(h, "X-Supervaize-Workspace-Authorization", "Bearer "+token)
	}
	return v.do(t, http.MethodPost, "/a2a", body, append(h, extra...)...)
}

// doTarget sends a request whose request target is exactly target (no
// client normalizes it) over v, and returns the status.
func (v httpVersion) doTarget(t *testing.T, method, target string, body []byte, headers ...string) int {
	t.Helper()
	req, err := http.NewRequest(method, v.base+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(target, "//") {
		req.URL.Path, req.URL.RawPath = target, "" // an Opaque "//…" would read as an authority
	} else {
		req.URL.Opaque = target
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := v.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s over %s: %v", method, target, v.name, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != v.proto {
		t.Fatalf("%s %s: answer over HTTP/%d, want HTTP/%d", method, target, resp.ProtoMajor, v.proto)
	}
	return resp.StatusCode
}

// ---------------------------------------------------------------- raw HTTP/2

// h2Outcome is what the server did with one raw HTTP/2 request.
type h2Outcome struct {
	connectProtocol bool          // the server's SETTINGS had ENABLE_CONNECT_PROTOCOL = 1 (RFC 8441)
	status          string        // the answer's :status ("" when none came)
	body            []byte        // the answer's DATA
	reset           bool          // the server reset the stream (RST_STREAM)
	resetCode       http2.ErrCode // its error code
}

// h2Raw opens an HTTP/2 connection to addr (host:port) — over TLS with ALPN
// h2 when tlsConf is not nil, else cleartext with the prior-knowledge
// preface — and sends one HEADERS frame on stream 1 with fields (name,
// value pairs, pseudo-headers first) exactly as given, leaving the stream
// open (as a CONNECT would). It reads until the answer ends, the stream is
// reset or the connection goes away (10 s at most), written with
// golang.org/x/net/http2's Framer and hpack, so no client library checks or
// drops anything.
func h2Raw(t *testing.T, addr string, tlsConf *tls.Config, fields ...string) h2Outcome {
	t.Helper()
	var conn net.Conn
	var err error
	if tlsConf != nil {
		tlsConf = tlsConf.Clone()
		tlsConf.NextProtos = []string{"h2"}
		conn, err = tls.Dial("tcp", addr, tlsConf)
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}

	var out h2Outcome
	sent := false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return out // the connection went away (or the deadline passed)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if v, ok := f.Value(http2.SettingEnableConnectProtocol); ok && v == 1 {
				out.connectProtocol = true
			}
			fr.WriteSettingsAck()
			if !sent { // after the server's SETTINGS, as RFC 8441 §3 asks
				sent = true
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				out.status = f.PseudoValue("status")
				if f.StreamEnded() {
					return out
				}
			}
		case *http2.DataFrame:
			if f.StreamID == 1 {
				out.body = append(out.body, f.Data()...)
				if f.StreamEnded() {
					return out
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				out.reset, out.resetCode = true, f.ErrCode
				return out
			}
		case *http2.GoAwayFrame:
			return out
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		}
	}
}

// hostPort is the host:port of a base URL.
func hostPort(base string) string {
	u, _ := url.Parse(base)
	return u.Host
}

// h3Do sends req over HTTP/3 with the client of v (quic-go's), with a
// deadline, and returns the status and body; a CONNECT or an extended
// CONNECT (req.Proto set to the :protocol, as quic-go reads it) too.
func h3Do(t *testing.T, v httpVersion, req *http.Request) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := v.client.Transport.RoundTrip(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s over HTTP/3: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
