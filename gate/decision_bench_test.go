package gate

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/supervaize/supervaizer-sidecar/events"
	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

const (
	benchIssuer   = "https://studio.bench"
	benchServerID = "srv-bench"
	benchAgent    = "agent_interviewer"
	benchAgentID  = "studio-agent-1"
	benchAPIKey   = "bench-write-key-0123456789"
)

// benchEnv is a provisioned gate (built field by field as Provision builds
// it: PEM verifier, metrics with their Observe hook, request memory) and the
// key that signs its tokens.
type benchEnv struct {
	g    *Gate
	priv ed25519.PrivateKey
}

// newBenchGate builds a token-mode gate with a PEM verifier whose
// verified-token cache holds cacheSize entries (0: the default 10,000).
// logJSON makes the audit logger a production JSON encoder writing to
// io.Discard (the encoding cost of the audit line is then measured);
// otherwise it is zap.NewNop().
func newBenchGate(b testing.TB, cacheSize int, logJSON bool) *benchEnv {
	b.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		b.Fatal(err)
	}
	pemKey, err := grants.LoadPublicKey(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))
	if err != nil {
		b.Fatal(err)
	}
	log := zap.NewNop()
	if logJSON {
		log = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
			zapcore.AddSync(io.Discard), zap.InfoLevel))
	}
	g := &Gate{
		log: log, maxBody: 1 << 20, maxBodyA2A: 16 << 20, maxBodyData: 16 << 20, // the defaults
		forwardToken: true, verified: VerifiedEach, legacyAllowed: true, otherRoutes: OtherDeny,
		agents: grants.Agents{benchAgent: benchAgentID}, serverID: benchServerID, mode: ModeToken,
		requests: events.NewMemory(),
		keys:     Keys{NewKey(benchAPIKey, true, "benchkey")},
	}
	g.metrics = NewMetrics(nil, JWKSAge(&g.verifier))
	v, err := grants.NewVerifier(grants.Config{Issuer: benchIssuer, ServerID: benchServerID,
		PublicKey: pemKey, CacheSize: cacheSize, Observe: g.metrics.ObserveVerify})
	if err != nil {
		b.Fatal(err)
	}
	g.verifier = v
	b.Cleanup(g.Close)
	return &benchEnv{g: g, priv: priv}
}

// mint signs a valid token for the fixture's workspace and agent.
func (e *benchEnv) mint(b testing.TB, jti string) string {
	b.Helper()
	now := time.Now().Unix()
	claims := jwt.MapClaims{
		"iss": benchIssuer, "aud": grants.AudiencePrefix + benchServerID, "sub": "workspace-agent-grant:grant-1",
		"grant_id": "grant-1", "workspace_id": "workspace_123", "workspace_slug": "acme",
		"agent_id": benchAgentID, "agent_slug": benchAgent, "server_id": benchServerID,
		"scopes": []any{"supervaizer/action.invoke", "supervaizer/surface.load", "job.start", "job.sync",
			"job.start.form", "resource.contacts.list", "resource.contacts.create"},
		"agent_workspace_ref": "agent-ws-1", "iat": now, "exp": now + 3600, "jti": jti,
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(e.priv)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchBody is the fixture's action request (action replaced when action
// is not "") in a compact JSON-RPC envelope with id 7.
func benchBody(b testing.TB, action string) []byte {
	b.Helper()
	raw, err := os.ReadFile("../test/testdata/agent_interviewer_mvp.json")
	if err != nil {
		b.Fatal(err)
	}
	var f struct {
		ActionRequest map[string]any `json:"action_request"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		b.Fatal(err)
	}
	if action != "" {
		f.ActionRequest["action"] = action
	}
	out, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": jsonrpc.MethodActionInvoke,
		"params": map[string]any{"action_request": f.ActionRequest}})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func benchCall(b testing.TB, action string) *jsonrpc.Call {
	b.Helper()
	call, perr := jsonrpc.Parse(benchBody(b, action))
	if perr != nil {
		b.Fatal(perr)
	}
	return call
}

// BenchmarkDecideCall is the workspace authorization decision for a parsed
// /a2a call (decideCall: bootstrap check, scopes, token verification through
// the verified-token cache with its metrics hook, grants.Authorize), for the
// fixture's job.start. Target (bench.mk): cached_token <= 3 us/op and <= 10
// allocs/op; its budget is 0 allocs/op (the scopes stay on the stack, the
// token is hashed in place).
func BenchmarkDecideCall(b *testing.B) {
	ctx := context.Background()
	call := benchCall(b, "")
	b.Run("cached_token", func(b *testing.B) {
		e := newBenchGate(b, 0, false)
		values := []string{"Bearer " + e.mint(b, "jti-cached")}
		if d := e.g.decideCall(ctx, call, earlyToken{token: grants.TokenFromHeader(values)}, &audit{}); !d.allowed() {
			b.Fatalf("denied: %v", d.refusal)
		}
		decide := func() {
			if d := e.g.decideCall(ctx, call, earlyToken{token: grants.TokenFromHeader(values)}, &audit{}); !d.allowed() {
				b.Fatal(d.refusal)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			decide()
		}
		allocBudget(b, 0, decide)
	})
	b.Run("uncached_token", func(b *testing.B) {
		const cache = 256
		e := newBenchGate(b, cache, false)
		pool := make([][]string, 2*cache) // used in turn: every call misses the LRU
		for i := range pool {
			pool[i] = []string{"Bearer " + e.mint(b, "jti-"+strconv.Itoa(i))}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if d := e.g.decideCall(ctx, call, earlyToken{token: grants.TokenFromHeader(pool[i%len(pool)])}, &audit{}); !d.allowed() {
				b.Fatal(d.refusal)
			}
			i++
		}
	})
}

// BenchmarkVerifiedHeaders is the header work every allowed /a2a call does
// on the request's header map: stripVerified (every request) then
// injectVerified (the ten X-Supervaize-Verified-* headers), on a map the
// size of a client's (each iteration starts from a copy of it made as the
// server makes one: sized for the headers it holds, so that the cost of
// giving room to ten more is measured).
func BenchmarkVerifiedHeaders(b *testing.B) {
	ctx := context.Background()
	e := newBenchGate(b, 0, false)
	values := []string{"Bearer " + e.mint(b, "jti-headers")}
	d := e.g.decideCall(ctx, benchCall(b, ""), earlyToken{token: grants.TokenFromHeader(values)}, &audit{})
	if !d.allowed() {
		b.Fatal(d.refusal)
	}
	h := http.Header{
		"X-Api-Key": {benchAPIKey}, "Content-Type": {"application/json"}, "User-Agent": {"Go-http-client/1.1"},
		"Accept-Encoding": {"gzip"}, "Content-Length": {"600"}, headerWorkspaceAuth: values,
	}
	b.Run("strip_and_inject", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hh := make(http.Header, len(h))
			for k, v := range h {
				hh[k] = v
			}
			stripVerified(hh)
			e.g.injectVerified(hh, d)
		}
	})
}

// benchRequestHeader is the header map of a Go client's /a2a call as Go's
// HTTP/1.1 server makes it (sized for the six headers it holds), so that
// the gate's cost of giving room to the verified headers is the real one.
func benchRequestHeader(auth string) http.Header {
	h := make(http.Header, 6)
	h["User-Agent"] = []string{"Go-http-client/1.1"}
	h["Content-Length"] = []string{"600"}
	h["Content-Type"] = []string{"application/json"}
	h["Accept-Encoding"] = []string{"gzip"}
	h["X-Api-Key"] = []string{benchAPIKey}
	h[headerWorkspaceAuth] = []string{auth}
	return h
}

// benchWriter is a minimal reusable http.ResponseWriter.
type benchWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(s int)           { w.status = s }
func (w *benchWriter) Write(p []byte) (int, error) { return w.body.Write(p) }
func (w *benchWriter) reset() {
	clear(w.h)
	w.status = 0
	w.body.Reset()
}

// BenchmarkServeHTTP runs the whole handler in process for POST /a2a (route,
// API key, body read, envelope, decision, headers, audit line, metrics) with
// a next handler that reads the body and answers a fixed JSON-RPC result, as
// the agent would; no network. The request object is rebuilt each iteration
// (its allocations are included). It is the in-handler share of the
// sidecar's cost per request in the load run; job_sync_cached_token has an
// allocation budget (allocBudget, checked in make bench).
//   - job_sync_cached_token: forwarded (the C scenario of the load run);
//   - job_start_replay_memory: answered from the idempotency memory store (F).
//
// audit=json is audit_log all (the default): an allow line per request,
// encoded by a zap JSON core into io.Discard; audit=nop is a no-op logger
// (the difference is the audit line's cost). The response writer accepts
// read deadlines, as Caddy's does.
func BenchmarkServeHTTP(b *testing.B) {
	next := benchUpstream()
	u := &url.URL{Path: "/a2a"}
	for _, audit := range []string{"json", "nop"} {
		for _, sc := range []struct{ name, action string }{
			{"job_sync_cached_token", "job.sync"}, {"job_start_replay_memory", "job.start"},
		} {
			b.Run(sc.name+"/audit="+audit, func(b *testing.B) {
				e := newBenchGate(b, 0, audit == "json")
				e.g.auditAllows = audit == "json" // audit_log all, the default
				if sc.action == "job.start" {
					st := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
					e.g.idemStore = st
					e.g.idem = idempotency.New(st,
						idempotency.Options{Observer: e.g.metrics.IdempotencyObserver(zap.NewNop())})
					e.g.maxRecordBytes = 1 << 20 // max_record_bytes' default
					e.g.idemActions = map[string]bool{"job.start": true}
				}
				body := benchBody(b, sc.action)
				auth := "Bearer " + e.mint(b, "jti-serve")
				bw := &benchWriter{h: http.Header{}}
				w := deadlineWriter{bw}
				serve := func() {
					r := &http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
						Host: "127.0.0.1", RequestURI: "/a2a", ContentLength: int64(len(body)),
						Body:   io.NopCloser(bytes.NewReader(body)),
						Header: benchRequestHeader(auth)}
					bw.reset()
					if err := e.g.Serve(w, r, next); err != nil {
						b.Fatal(err)
					}
					if bw.status != http.StatusOK || !bytes.Contains(bw.body.Bytes(), []byte(`"result"`)) {
						b.Fatalf("answer %d %s", bw.status, bw.body.Bytes())
					}
				}
				serve() // warms the token cache; records job.start
				if sc.action == "job.start" {
					serve()
					if w.h.Get(idempotency.ReplayHeader) != "true" {
						b.Fatal("second job.start was not a replay")
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					serve()
				}
				if sc.action == "job.sync" {
					// Budget: 25 allocs/op, the bench's own request (13:
					// the request, its body reader, the six-header map)
					// included; the gate's (11.5 on average) are listed in bench/README.md
					// ("What the gate costs, and what was cut").
					allocBudget(b, 25, serve)
				}
			})
		}
	}
}

// benchUpstream is the agent of the handler benchmarks: it reads the body and
// answers a fixed JSON-RPC result.
func benchUpstream() Next {
	result := []byte(`{"jsonrpc":"2.0","id":7,"result":{"status":"ok","effects":[]}}`)
	return nextFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(result)))
		w.WriteHeader(http.StatusOK)
		_, err := w.Write(result)
		return err
	})
}

// nextFunc is a Next from a function (caddyhttp.HandlerFunc's shape).
type nextFunc func(http.ResponseWriter, *http.Request) error

func (f nextFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) error { return f(w, r) }
