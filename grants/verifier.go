package grants

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// MaxTokenBytes bounds the compact token (16 KiB); a longer one is malformed.
const MaxTokenBytes = 16 << 10

// AudiencePrefix starts the default expected audience, "supervaizer-server:<server_id>".
const AudiencePrefix = "supervaizer-server:"

// Config configures a Verifier. Exactly one of PublicKey and JWKS is set.
type Config struct {
	Issuer   string // expected iss; required
	Audience string // expected aud; default AudiencePrefix + ServerID
	ServerID string // this server's Studio id; the expected server_id claim

	PublicKey ed25519.PublicKey // a key from LoadPublicKey, or nil
	JWKS      *JWKSOptions      // a JWKS source, or nil

	Leeway    time.Duration    // clock skew tolerance for exp, iat, nbf (default 30 s; negative means 0)
	CacheSize int              // verified-token cache entries (default 10,000; <0 disables the cache)
	Now       func() time.Time // clock (default time.Now)

	// Observe, if set, is called after every Verify that reached the
	// verified-token cache (a token present and within MaxTokenBytes) with
	// whether the cache answered, the time spent, and the failure code ("" on
	// success). It must not block.
	Observe func(cached bool, d time.Duration, code string)
}

// Verifier verifies workspace authorization tokens. It is safe for
// concurrent use. Close stops the JWKS background refresh.
type Verifier struct {
	cfg            Config
	expectedServer string
	keys           keySource
	jwks           *jwksSource
	parser         *jwt.Parser
	cache          *lru.Cache[[sha256.Size]byte, cached]
	cancel         context.CancelFunc
}

type cached struct {
	claims *Claims
	until  time.Time // exp + leeway: the entry is dead from then on
	keyGen uint64    // JWKS key-set generation it was verified with
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
// empty or not a URL; server id missing when no audience names one.
func NewVerifier(cfg Config) (*Verifier, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("workspace_auth issuer is required")
	}
	if (cfg.PublicKey == nil) == (cfg.JWKS == nil) {
		return nil, errors.New("workspace_auth needs exactly one of public_key and jwks_url")
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	if cfg.Leeway < 0 {
		cfg.Leeway = 0
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
	v := &Verifier{cfg: cfg, expectedServer: cfg.ServerID}
	if rest, ok := strings.CutPrefix(cfg.Audience, AudiencePrefix); ok {
		v.expectedServer = rest
	}
	if v.expectedServer == "" {
		return nil, errors.New("server_id is required")
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 10000
		v.cfg.CacheSize = cfg.CacheSize
	}
	if cfg.CacheSize > 0 {
		c, err := lru.New[[sha256.Size]byte, cached](cfg.CacheSize)
		if err != nil {
			return nil, err
		}
		v.cache = c
	}
	v.parser = jwt.NewParser(
		jwt.WithJSONNumber(),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(cfg.Now),
	)
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
	src, err := newJWKSSource(ctx, *cfg.JWKS)
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

// Ready reports whether keys are loaded: always with a PEM, after the first
// good JWKS fetch otherwise.
func (v *Verifier) Ready() bool { return v.keys.ready() }

// JWKSStatus reports, for a JWKS source, whether keys were ever loaded, the
// time of the last good fetch, and the last fetch error; ok is false with a PEM.
func (v *Verifier) JWKSStatus() (loaded bool, lastGood time.Time, lastErr error, ok bool) {
	if v.jwks == nil {
		return false, time.Time{}, nil, false
	}
	loaded, lastGood, lastErr = v.jwks.status()
	return loaded, lastGood, lastErr, true
}

// ValidUntil is the instant after which claims verified by v are no longer
// accepted: exp plus the clock-skew leeway.
func (v *Verifier) ValidUntil(c *Claims) time.Time {
	return time.Unix(c.ExpiresAt, 0).Add(v.cfg.Leeway)
}

// ExpectedServerID is the server_id tokens must carry.
func (v *Verifier) ExpectedServerID() string { return v.expectedServer }

// Verify checks token (the compact JWT, without "Bearer ") and returns its
// claims. It runs, in the SDK's order, the checks that do not depend on the
// call: missing, malformed (not three base64url parts of which the first two
// are exactly one JSON object each without duplicate keys, a "crit" header,
// over MaxTokenBytes), unsupported_alg (alg other than EdDSA),
// missing_kid / jwks_unavailable / invalid_jwks / unknown_kid / invalid_jwk
// (JWKS mode), bad_signature, invalid_claims, wrong_issuer, wrong_audience,
// expired (exp+leeway < now), not_yet_valid (iat-leeway > now, or nbf),
// wrong_server. Every error is an *Error.
//
// A verified token's claims are cached by SHA-256 of the token until
// exp+leeway, so a repeated token skips the signature check; an expired
// entry, or one verified before the JWKS key set changed, is verified again.
func (v *Verifier) Verify(ctx context.Context, token string) (*Claims, error) {
	start := time.Now()
	claims, hit, err := v.verify(ctx, token)
	if v.cfg.Observe != nil && token != "" && len(token) <= MaxTokenBytes {
		code := ""
		if err != nil {
			code = err.Code
		}
		v.cfg.Observe(hit, time.Since(start), code)
	}
	if err != nil {
		return nil, err
	}
	return claims, nil
}

func (v *Verifier) verify(ctx context.Context, token string) (*Claims, bool, *Error) {
	if token == "" {
		return nil, false, fail(CodeMissing, "Workspace authorization token is missing")
	}
	if len(token) > MaxTokenBytes {
		return nil, false, fail(CodeMalformed, "Workspace authorization token is too large")
	}
	var sum [sha256.Size]byte
	if v.cache != nil {
		sum = SHA256String(token)
		if e, ok := v.cache.Get(sum); ok {
			if v.cfg.Now().Before(e.until) && e.keyGen == v.keyGen() {
				return e.claims, true, nil
			}
			v.cache.Remove(sum)
		}
	}

	if e := segmentsError(token); e != nil {
		return nil, false, e
	}
	var keyErr *Error
	gen := v.keyGen() // read before the key lookup: a concurrent rotation re-verifies next time
	mapClaims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, mapClaims, func(t *jwt.Token) (any, error) {
		if alg, _ := t.Header["alg"].(string); alg != jwt.SigningMethodEdDSA.Alg() || t.Method != jwt.SigningMethodEdDSA {
			keyErr = fail(CodeUnsupportedAlg, "Workspace authorization token must be signed with EdDSA")
			return nil, keyErr
		}
		if _, ok := t.Header["crit"]; ok {
			keyErr = fail(CodeMalformed, "Workspace authorization token has an unsupported crit header")
			return nil, keyErr
		}
		k, e := v.keys.key(ctx, t)
		if e != nil {
			keyErr = e
			return nil, e
		}
		return k, nil
	})
	if keyErr != nil {
		return nil, false, keyErr
	}
	if err != nil && !errors.Is(err, jwt.ErrTokenInvalidClaims) {
		switch {
		case errors.Is(err, jwt.ErrTokenSignatureInvalid):
			return nil, false, fail(CodeBadSignature, "Workspace authorization token signature is invalid")
		case errors.Is(err, jwt.ErrTokenUnverifiable):
			// The only cause left (key errors returned above): alg missing or
			// not a JWT algorithm golang-jwt knows.
			return nil, false, fail(CodeUnsupportedAlg, "Workspace authorization token must be signed with EdDSA")
		default:
			return nil, false, fail(CodeMalformed, "Workspace authorization token is malformed")
		}
	}
	// The signature verified; err is nil or lists every failed claim check.
	claims, shapeErr := claimsFromMap(mapClaims)
	if shapeErr != nil {
		return nil, false, shapeErr
	}
	switch {
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return nil, false, fail(CodeWrongIssuer, "Workspace authorization token issuer is not trusted")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return nil, false, fail(CodeWrongAudience, "Workspace authorization token audience does not match this server")
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, false, fail(CodeExpired, "Workspace authorization token has expired")
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued), errors.Is(err, jwt.ErrTokenNotValidYet):
		return nil, false, fail(CodeNotYetValid, "Workspace authorization token is not valid yet")
	case err != nil:
		return nil, false, fail(CodeInvalidClaims, "Workspace authorization token claims are invalid")
	}
	if claims.ServerID != v.expectedServer {
		return nil, false, fail(CodeWrongServer, "Workspace authorization token is for another server")
	}
	if v.cache != nil {
		v.cache.Add(sum, cached{claims: claims, until: v.ValidUntil(claims), keyGen: gen})
	}
	return claims, false, nil
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

// segmentsError checks that token has three dot-separated parts whose first
// two are base64url of exactly one JSON object each (no null, no trailing
// data, no duplicate key, bounded depth), so that golang-jwt, which would
// accept "null" or "{...} {}", and the SDK read the same claims. It returns
// nil, or CodeMalformed with the SDK's text for what failed: not three parts
// (MsgNotCompactJWT), a part that does not decode (the code's text), a part
// that is JSON but not an object (MsgNotObjects).
func segmentsError(token string) *Error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return failText(CodeMalformed, MsgNotCompactJWT, "not three dot-separated parts")
	}
	notObject := false
	for _, seg := range parts[:2] {
		b, err := base64.RawURLEncoding.DecodeString(seg)
		switch {
		case err != nil || !json.Valid(b):
			return fail(CodeMalformed, "a part is not base64url of JSON")
		case jsonrpc.IsJSONObject(b):
		case bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")):
			return fail(CodeMalformed, "a part is a JSON object with a duplicate key, a lone surrogate or deep nesting")
		default:
			notObject = true
		}
	}
	if notObject {
		return failText(CodeMalformed, MsgNotObjects, "a part is JSON but not an object")
	}
	return nil
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
