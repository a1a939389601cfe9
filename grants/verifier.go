package grants

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// MaxTokenBytes bounds the compact token (16 KiB); a longer one is malformed.
const MaxTokenBytes = 16 << 10

// AudiencePrefix starts the default expected audience, "supervaizer-server:<server_id>".
const AudiencePrefix = "supervaizer-server:"

// DefaultLeeway is the clock skew tolerance of a Config without a Leeway
// (the SDK's default leeway_seconds).
const DefaultLeeway = 30 * time.Second

// Config configures a Verifier. Exactly one of PublicKey and JWKS is set.
type Config struct {
	Issuer   string // expected iss; required
	Audience string // expected aud; default AudiencePrefix + ServerID
	ServerID string // this server's Studio id; the expected server_id claim

	PublicKey ed25519.PublicKey // a key from LoadPublicKey, or nil
	JWKS      *JWKSOptions      // a JWKS source, or nil

	// Leeway is the clock skew tolerance for exp, iat and nbf: nil means
	// DefaultLeeway, a pointer to 0 none; a negative one is refused. Like the
	// SDK's leeway_seconds it counts whole seconds: a sub-second part is
	// dropped (1.9 s acts as 1 s, 500 ms as 0).
	Leeway    *time.Duration
	CacheSize int              // verified-token cache entries (default 10,000; <0 disables the cache)
	Now       func() time.Time // clock (default time.Now); a test hook for the time checks and JWKS staleness

	// MaxTokenLifetime, if positive, refuses with invalid_claims a token
	// whose exp - iat exceeds it, or that has no iat (its lifetime cannot be
	// known). Compared in whole seconds. 0 (default): no bound, as the SDK.
	MaxTokenLifetime time.Duration

	// Observe, if set, is called after every Verify that reached the
	// verified-token cache (a token present and within MaxTokenBytes) with
	// whether the cache answered, the time spent (0 when the cache answered:
	// that path is not timed), and the failure code ("" on success). It must
	// not block.
	Observe func(cached bool, d time.Duration, code string)
}

// Verifier verifies workspace authorization tokens. It is safe for
// concurrent use. Close stops the JWKS background refresh.
type Verifier struct {
	cfg            Config
	leeway         int64 // Config.Leeway in whole seconds
	maxLifetime    int64 // Config.MaxTokenLifetime in whole seconds; 0: off
	expectedServer string
	keys           keySource
	jwks           *jwksSource
	cache          *lru.Cache[[sha256.Size]byte, cached]
	cancel         context.CancelFunc
}

type cached struct {
	claims *Claims
	last   int64  // exp + leeway (Unix seconds): the last whole second the entry is used in
	keyGen uint64 // JWKS key-set generation it was verified with
}

// keyGen is the current JWKS key-set generation (0 with a PEM).
func (v *Verifier) keyGen() uint64 {
	if v.jwks == nil {
		return 0
	}
	return v.jwks.gen.Load()
}

// NewVerifier checks cfg and builds a Verifier; with a JWKS it starts the
// first fetch and the background refresh (a failed first fetch is not an
// error: tokens fail with jwks_unavailable and Ready is false until a
// document loads).
//
// Errors: issuer empty; neither or both of PublicKey and JWKS; JWKS URL
// empty or not a URL; a negative Leeway; server id missing when no
// audience names one.
func NewVerifier(cfg Config) (*Verifier, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("workspace_auth issuer is required")
	}
	if (cfg.PublicKey == nil) == (cfg.JWKS == nil) {
		return nil, errors.New("workspace_auth needs exactly one of public_key and jwks_url")
	}
	leeway := DefaultLeeway
	if cfg.Leeway != nil {
		leeway = *cfg.Leeway
	}
	if leeway < 0 {
		return nil, fmt.Errorf("workspace_auth leeway must not be negative, not %v", leeway)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Audience == "" {
		if cfg.ServerID == "" {
			return nil, errors.New("server_id is required to derive the expected audience")
		}
		cfg.Audience = AudiencePrefix + cfg.ServerID
	}
	v := &Verifier{cfg: cfg, expectedServer: cfg.ServerID, leeway: int64(leeway / time.Second)}
	if cfg.MaxTokenLifetime > 0 {
		v.maxLifetime = max(int64(cfg.MaxTokenLifetime/time.Second), 0)
	}
	if rest, ok := strings.CutPrefix(cfg.Audience, AudiencePrefix); ok {
		v.expectedServer = rest
	}
	if v.expectedServer == "" {
		return nil, errors.New("server_id is required")
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
		v.cfg.CacheSize = cfg.CacheSize
	}
	if cfg.CacheSize > 0 {
		c, err := lru.New[[sha256.Size]byte, cached](cfg.CacheSize)
		if err != nil {
			return nil, err
		}
		v.cache = c
	}
	// The token is read by parseToken and checked by verify in the order
	// and with the answers of golang-jwt's parser (EdDSA only, its claims
	// validator off) followed by the SDK's claim checks (checkClaims): the
	// SDK's order (iss, aud, exp, iat) and one code for the first failure;
	// whole seconds with exp + leeway still valid; a missing or mistyped
	// claim is invalid_claims listing every claim (claimsModel).
	if cfg.PublicKey != nil {
		if len(cfg.PublicKey) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("public_key: Ed25519 key must be %d bytes", ed25519.PublicKeySize)
		}
		v.keys = pemSource{pub: cfg.PublicKey}
		return v, nil
	}
	if cfg.JWKS.URL == "" {
		return nil, errors.New("workspace_auth jwks_url is empty")
	}
	ctx, cancel := context.WithCancel(context.Background())
	src, err := newJWKSSource(ctx, *cfg.JWKS, cfg.Now)
	if err != nil {
		cancel()
		return nil, err
	}
	v.keys, v.jwks, v.cancel = src, src, cancel
	return v, nil
}

// Close stops the JWKS refresh goroutine. Verify keeps answering from the
// keys already loaded.
func (v *Verifier) Close() {
	if v.cancel != nil {
		v.cancel()
	}
}

// Ready reports whether keys can verify: always with a PEM; with a JWKS,
// after a good fetch (a document with at least one usable Ed25519 key) and,
// with JWKSOptions.MaxStale, while the last one is no older than that.
func (v *Verifier) Ready() bool { return v.keys.ready() }

// KeysStale reports whether the JWKS keys are past JWKSOptions.MaxStale
// since the last good fetch (tokens then fail jwks_unavailable); always
// false with a PEM or without MaxStale.
func (v *Verifier) KeysStale() bool { return v.jwks != nil && v.jwks.stale() }

// JWKSStatus reports, for a JWKS source, whether keys were ever loaded, the
// time of the last good fetch, and the last fetch error; ok is false with a PEM.
func (v *Verifier) JWKSStatus() (loaded bool, lastGood time.Time, lastErr error, ok bool) {
	if v.jwks == nil {
		return false, time.Time{}, nil, false
	}
	loaded, lastGood, lastErr = v.jwks.status()
	return loaded, lastGood, lastErr, true
}

// RefreshJWKS fetches the JWKS document now (joining a fetch already in
// progress), detached from ctx, which only bounds the wait; it is not
// rate-limited (for operators: /_sidecar/refresh). It returns whether a JWKS
// is configured (false with a PEM) and the fetch error, if any.
func (v *Verifier) RefreshJWKS(ctx context.Context) (bool, error) {
	if v.jwks == nil {
		return false, nil
	}
	return true, v.jwks.wait(ctx, v.jwks.startFetch())
}

// ValidUntil is the first instant at which claims verified by v are no
// longer accepted: exp + leeway + 1 s. Time checks are in whole seconds
// (now = floor(Unix time)), so a token is accepted while now ≤ exp + leeway.
func (v *Verifier) ValidUntil(c *Claims) time.Time {
	return time.Unix(satAdd(c.ExpiresAt, v.leeway), 0).Add(time.Second)
}

// ExpectedServerID is the server_id tokens must carry.
func (v *Verifier) ExpectedServerID() string { return v.expectedServer }

// VerifyOptions adjust one verification.
type VerifyOptions struct {
	// RefreshUnknownKID lets this call trigger a JWKS refresh when its kid is
	// not among the loaded keys, or the keys are past MaxStale (at most one
	// fetch at a time, rate-limited by UnknownKIDInterval, run detached from
	// ctx with its own HTTPTimeout; the call waits at most HTTPTimeout).
	// Set it only for calls a caller has already bound to this server: the
	// sidecar sets it for calls that passed the transport key and name an
	// agent served here (gate/decision.go, decideToken), so that
	// anyone else cannot spend the shared refresh budget with random kids.
	RefreshUnknownKID bool
	// Unobserved keeps this verification from Config.Observe: the caller
	// verified the same token a moment ago, before the body was read
	// (observed then: gate/body.go, bodyOwner), and checks it again, now
	// with the call in hand (gate/decision.go, decideToken).
	Unobserved bool
}

// Verify is VerifyWith without options: an unknown kid never triggers a
// JWKS refresh.
func (v *Verifier) Verify(ctx context.Context, token string) (*Claims, error) {
	return v.VerifyWith(ctx, token, VerifyOptions{})
}

// VerifyWith checks token (the compact JWT, without "Bearer ") and returns
// its claims. It runs, in the SDK's order, the checks that do not depend on
// the call: missing, malformed (not three base64url parts of which the first
// two are exactly one JSON object each without duplicate keys, a "crit"
// header, over MaxTokenBytes), unsupported_alg (alg other than EdDSA),
// missing_kid / jwks_unavailable (also: keys past MaxStale) / invalid_jwks /
// unknown_kid / invalid_jwk (JWKS mode), bad_signature, invalid_claims, then
// checkClaims (wrong_issuer, wrong_audience, expired, not_yet_valid, …),
// wrong_server. Every error is a *refusal.Refusal.
//
// A verified token's claims are cached by SHA-256 of the token while
// now ≤ exp + leeway (whole seconds), so a repeated token skips the
// signature check; an entry past that second, verified before the JWKS key
// set changed, or whose keys are past MaxStale, is verified again.
func (v *Verifier) VerifyWith(ctx context.Context, token string, o VerifyOptions) (*Claims, error) {
	vt, err := v.VerifyOnce(ctx, token, o)
	return vt.Claims, err
}

// Verified is a token VerifyOnce accepted: its claims, and what VerifyAgain
// needs to answer for the same token again without hashing it.
type Verified struct {
	Claims *Claims // nil when the token was refused
	by     *Verifier
	token  string
	entry  cached
}

// VerifyOnce is VerifyWith, also returning what VerifyAgain takes.
func (v *Verifier) VerifyOnce(ctx context.Context, token string, o VerifyOptions) (Verified, error) {
	start := time.Now()
	e, hit, err := v.verify(ctx, token, o)
	if v.cfg.Observe != nil && !o.Unobserved && token != "" && len(token) <= MaxTokenBytes {
		code := ""
		if err != nil {
			code = err.Code
		}
		var d time.Duration // a cache answer is not timed: Observe counts it only
		if !hit {
			d = time.Since(start)
		}
		v.cfg.Observe(hit, d, code)
	}
	if err != nil {
		return Verified{}, err
	}
	return Verified{Claims: e.claims, by: v, token: token, entry: e}, nil
}

// VerifyAgain is VerifyWith(ctx, token, o) for a token that VerifyOnce
// accepted a moment ago (prev): while the verified-token cache would answer
// it with prev's claims (prev from v for this same token, the cache on,
// now ≤ exp + leeway, the JWKS key set unchanged and not past MaxStale),
// it answers them as a cache answer (observed as one unless o.Unobserved)
// without hashing the token or locking the cache; otherwise it is
// VerifyWith. For a caller that checks one request's token twice (the
// gate: before the body, to charge it, then with the call in hand).
func (v *Verifier) VerifyAgain(ctx context.Context, token string, prev Verified, o VerifyOptions) (*Claims, error) {
	if prev.by == v && prev.Claims != nil && v.cache != nil && prev.token == token && v.fresh(prev.entry) {
		if v.cfg.Observe != nil && !o.Unobserved {
			v.cfg.Observe(true, 0, "")
		}
		return prev.Claims, nil
	}
	return v.VerifyWith(ctx, token, o)
}

// fresh reports whether the cache still answers with e: now ≤ exp + leeway,
// verified with the current JWKS key set, whose keys are not past MaxStale.
func (v *Verifier) fresh(e cached) bool {
	return v.cfg.Now().Unix() <= e.last && e.keyGen == v.keyGen() && !v.KeysStale()
}

func (v *Verifier) verify(ctx context.Context, token string, o VerifyOptions) (cached, bool, *refusal.Refusal) {
	if token == "" {
		return cached{}, false, fail(CodeMissing, "Workspace authorization token is missing")
	}
	if len(token) > MaxTokenBytes {
		return cached{}, false, fail(CodeMalformed, "Workspace authorization token is too large")
	}
	var sum [sha256.Size]byte
	if v.cache != nil {
		sum = SHA256String(token)
		if e, ok := v.cache.Get(sum); ok {
			if v.fresh(e) {
				return e, true, nil
			}
			v.cache.Remove(sum)
		}
	}
	e, err := v.verifyToken(ctx, token, o)
	if err == nil && v.cache != nil {
		v.cache.Add(sum, e)
	}
	return e, false, err
}

// verifyToken is verify without the cache: the token read and checked,
// and the cache entry its claims would make.
func (v *Verifier) verifyToken(ctx context.Context, token string, o VerifyOptions) (cached, *refusal.Refusal) {
	var p parsedToken // on the stack: the key source takes the header by value
	defer p.release()
	if e := parseToken(token, &p); e != nil {
		return cached{}, e
	}
	// As golang-jwt did, with the parser options the verifier used
	// (jwt.WithValidMethods EdDSA): a known alg other than EdDSA, then,
	// from the key function, crit and the key, then the signature.
	if p.method.Alg() != jwt.SigningMethodEdDSA.Alg() {
		return cached{}, fail(CodeUnsupportedAlg, "Workspace authorization token must be signed with EdDSA")
	}
	if p.crit {
		return cached{}, fail(CodeMalformed, "Workspace authorization token has an unsupported crit header")
	}
	gen := v.keyGen() // read before the key lookup: a concurrent rotation re-verifies next time
	k, keyErr := v.keys.key(ctx, p.header, o.RefreshUnknownKID)
	if keyErr != nil {
		return cached{}, keyErr
	}
	good := len(k) == ed25519.PublicKeySize && verifyEd25519(k, p.signingInput, p.sig)
	p.release() // the claims read below are copies of their own
	if !good {
		return cached{}, fail(CodeBadSignature, "Workspace authorization token signature is invalid")
	}
	// The signature verified.
	claims, shapeErr := claimsModel(&p.claims)
	if shapeErr != nil {
		return cached{}, shapeErr
	}
	if e := v.checkClaims(claims, v.cfg.Now().Unix()); e != nil {
		e.Token = refusedToken(claims)
		return cached{}, e
	}
	if claims.ServerID != v.expectedServer {
		e := fail(CodeWrongServer, "Workspace authorization token is for another server")
		e.Token = refusedToken(claims)
		return cached{}, e
	}
	claims.scopeString = strings.Join(claims.Scopes, " ") // once per verified token, not per request
	claims.headerSafe = headerSafeClaims(claims)
	return cached{claims: claims, last: satAdd(claims.ExpiresAt, v.leeway), keyGen: gen}, nil
}

// SHA256String returns the SHA-256 of s's bytes: the same digest as
// sha256.Sum256([]byte(s)), without copying s to the heap (it is hashed
// through a small stack buffer). The verified-token cache is keyed by it;
// the gate compares API keys by it.
func SHA256String(s string) (sum [sha256.Size]byte) {
	h := sha256.New()
	var buf [256]byte // a multiple of the SHA-256 block size
	for len(s) > 0 {
		n := copy(buf[:], s)
		h.Write(buf[:n])
		s = s[n:]
	}
	h.Sum(sum[:0])
	return sum
}

// TokenFromHeader extracts the token from the values of the
// X-Supervaize-Workspace-Authorization header: "Bearer <jwt>" or the bare
// token, surrounding spaces trimmed. No value, more than one value, or an
// empty value yield "" (missing), so an ambiguous request is never verified.
func TokenFromHeader(values []string) string {
	if len(values) != 1 {
		return ""
	}
	v := strings.TrimSpace(values[0])
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		v = strings.TrimSpace(v[7:])
	}
	return v
}
