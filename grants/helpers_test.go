package grants_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

const (
	testIssuer  = "https://studio.supervaize.com"
	testServer  = "01SERVER"
	testAud     = "supervaizer-server:" + testServer
	testAgent   = "agent_interviewer"
	testAgentID = "01AGENT"
)

// t0 is the fake clock's start; tokens are minted relative to it.
var t0 = time.Unix(1_800_000_000, 0)

// clock is a fake clock for Config.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// signer is a real Ed25519 key pair with a kid.
type signer struct {
	kid  string
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
}

func newSigner(t testing.TB, kid string) *signer {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &signer{kid: kid, pub: pub, priv: priv}
}

// jwk is the signer's public key as an OKP Ed25519 JWK.
func (s *signer) jwk() map[string]any {
	return map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": s.kid, "use": "sig", "alg": "EdDSA",
		"x": base64.RawURLEncoding.EncodeToString(s.pub)}
}

// baseClaims are valid claims at t0 for the test server and agent.
func baseClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"iss":            testIssuer,
		"aud":            testAud,
		"sub":            "user_123",
		"grant_id":       "grant_1",
		"workspace_id":   "workspace_123",
		"workspace_slug": "acme",
		"agent_id":       testAgentID,
		"agent_slug":     testAgent,
		"server_id":      testServer,
		"scopes":         []any{"supervaizer/action.invoke", "job.start"},
		"iat":            t0.Unix() - 10,
		"exp":            t0.Unix() + 300,
		"jti":            "jti_1",
	}
}

// mint signs claims with golang-jwt (EdDSA), with the signer's kid unless
// header overrides it (a nil value deletes a header member).
func (s *signer) mint(t testing.TB, claims jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = s.kid
	for k, v := range header {
		if v == nil {
			delete(tok.Header, k)
			continue
		}
		tok.Header[k] = v
	}
	out, err := tok.SignedString(s.priv)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mintWith mints baseClaims edited by edit.
func (s *signer) mintWith(t testing.TB, edit func(jwt.MapClaims)) string {
	t.Helper()
	c := baseClaims()
	if edit != nil {
		edit(c)
	}
	return s.mint(t, c, nil)
}

// raw builds a token from raw header and claims JSON, signed by s (the
// signature is over the exact base64url segments).
func (s *signer) raw(header, claims string) string {
	in := base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString([]byte(claims))
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, []byte(in)))
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jwksServer serves a JWKS document on loopback and counts fetches.
type jwksServer struct {
	srv     *httptest.Server
	fetches atomic.Int64
	mu      sync.Mutex
	status  int
	doc     []byte
}

func startJWKS(t testing.TB, keys ...map[string]any) *jwksServer {
	t.Helper()
	j := &jwksServer{status: http.StatusOK}
	j.setKeys(t, keys...)
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		status, doc := j.status, j.doc
		j.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(doc)
	}))
	t.Cleanup(j.srv.Close)
	return j
}

func (j *jwksServer) setKeys(t testing.TB, keys ...map[string]any) {
	if keys == nil {
		keys = []map[string]any{}
	}
	j.setDoc(http.StatusOK, []byte(mustJSON(t, map[string]any{"keys": keys})))
}

func (j *jwksServer) setDoc(status int, doc []byte) {
	j.mu.Lock()
	j.status, j.doc = status, doc
	j.mu.Unlock()
}

func (j *jwksServer) url() string { return j.srv.URL + "/.well-known/jwks.json" }

// observation is one Config.Observe call.
type observation struct {
	cached bool
	code   string
}

type observer struct {
	mu  sync.Mutex
	obs []observation
}

func (o *observer) observe(cached bool, _ time.Duration, code string) {
	o.mu.Lock()
	o.obs = append(o.obs, observation{cached, code})
	o.mu.Unlock()
}

// count is the number of Observe calls so far.
func (o *observer) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.obs)
}

func (o *observer) last(t testing.TB) observation {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.obs) == 0 {
		t.Fatal("Observe was not called")
	}
	return o.obs[len(o.obs)-1]
}

// pemVerifier is a PEM-key verifier on the fake clock.
func pemVerifier(t testing.TB, pub ed25519.PublicKey, clk *clock, edit func(*grants.Config)) *grants.Verifier {
	t.Helper()
	cfg := grants.Config{Issuer: testIssuer, ServerID: testServer, PublicKey: pub, Now: clk.Now}
	if edit != nil {
		edit(&cfg)
	}
	v, err := grants.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

// jwksVerifier is a JWKS verifier on the fake clock.
func jwksVerifier(t testing.TB, url string, clk *clock, edit func(*grants.Config)) *grants.Verifier {
	t.Helper()
	cfg := grants.Config{Issuer: testIssuer, ServerID: testServer, Now: clk.Now,
		JWKS: &grants.JWKSOptions{URL: url, HTTPTimeout: 2 * time.Second}}
	if edit != nil {
		edit(&cfg)
	}
	v, err := grants.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

// codeOf returns the data.code of err ("" for nil), failing on a non-*refusal.Refusal.
func codeOf(t testing.TB, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	e, ok := err.(*refusal.Refusal)
	if !ok {
		t.Fatalf("error %T %v is not a *refusal.Refusal", err, err)
	}
	return e.Code
}

// eventually polls cond every 10 ms until it holds, failing the test after
// a generous deadline (what names the awaited event, explain the last state
// seen). It asserts an outcome, never a duration.
func eventually(t *testing.T, what string, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, explain())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
