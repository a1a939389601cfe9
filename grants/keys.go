package grants

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/tidwall/gjson"
	"golang.org/x/time/rate"
)

// MaxJWKSBytes bounds a JWKS document (1 MiB); a larger one is invalid.
const MaxJWKSBytes = 1 << 20

// LoadPublicKey reads an Ed25519 public key from value, which is either an
// inline PEM (it contains "-----BEGIN") or the path of a PEM file. The PEM
// must hold one PKIX SubjectPublicKeyInfo ("PUBLIC KEY") block.
//
// Errors: the file cannot be read; no PEM block; the block does not parse as
// PKIX; the key is not Ed25519. Each message names the problem, never the key.
func LoadPublicKey(value string) (ed25519.PublicKey, error) {
	data := []byte(value)
	if !strings.Contains(value, "-----BEGIN") {
		b, err := os.ReadFile(value)
		if err != nil {
			return nil, fmt.Errorf("public_key: reading PEM file: %w", err)
		}
		data = b
	}
	block, _ := pem.Decode(bytes.TrimSpace(data))
	if block == nil {
		return nil, errors.New("public_key: no PEM block found")
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("public_key: PEM does not hold a PKIX public key: %w", err)
	}
	edKey, ok := key.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public_key: key is %T, not Ed25519", key)
	}
	return edKey, nil
}

// keySource returns the verification key for a parsed token, or an *Error.
type keySource interface {
	key(ctx context.Context, t *jwt.Token) (ed25519.PublicKey, *Error)
	ready() bool
}

type pemSource struct{ pub ed25519.PublicKey }

func (p pemSource) key(context.Context, *jwt.Token) (ed25519.PublicKey, *Error) { return p.pub, nil }
func (p pemSource) ready() bool                                                 { return true }

// JWKSOptions configure a JWKS key source. Durations are wall-clock.
type JWKSOptions struct {
	URL string
	// RefreshInterval is the background refresh period (default 5 min).
	RefreshInterval time.Duration
	// UnknownKIDInterval is the minimum time between refreshes triggered by an
	// unknown kid (default 30 s); at most one such refresh runs at a time and a
	// token that would have to wait longer fails with unknown_kid at once.
	UnknownKIDInterval time.Duration
	// HTTPTimeout bounds one JWKS fetch (default 5 s).
	HTTPTimeout time.Duration
	// Client is the HTTP client (default: a new client with HTTPTimeout).
	Client *http.Client
	// OnRefresh is called after each fetch with nil or the error (may be nil).
	OnRefresh func(err error)
}

// jwksSource keeps the keys of a JWKS document through keyfunc/jwkset, and
// knows whether a good document was ever loaded and why the last fetch failed.
type jwksSource struct {
	kf keyfunc.Keyfunc
	// gen changes whenever a refresh installs a different key set, so that
	// verified-token cache entries made with an older set are verified again
	// (a key removed by rotation stops working at the next refresh).
	gen       atomic.Uint64
	setFP     string          // guarded by mu
	badKIDs   map[string]bool // kids of the last document's unusable keys; guarded by mu
	mu        sync.Mutex
	loaded    bool
	lastGood  time.Time
	lastError error
	onRefresh func(error)
}

// errInvalidJWKS marks a fetched document that is not {"keys":[{...},...]}.
var errInvalidJWKS = errors.New("JWKS document is not an object with a keys list of objects")

func newJWKSSource(ctx context.Context, o JWKSOptions) (*jwksSource, error) {
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 5 * time.Minute
	}
	if o.UnknownKIDInterval <= 0 {
		o.UnknownKIDInterval = 30 * time.Second
	}
	if o.HTTPTimeout <= 0 {
		o.HTTPTimeout = 5 * time.Second
	}
	client := o.Client
	if client == nil {
		client = &http.Client{Timeout: o.HTTPTimeout}
	}
	base := client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	shaped := *client
	s := &jwksSource{onRefresh: o.OnRefresh}
	shaped.Transport = jwksShapeCheck{base: base, src: s}

	store := &trackingStorage{MemoryJWKSet: jwkset.NewMemoryStorage(), src: s}
	httpStore, err := jwkset.NewStorageFromHTTP(o.URL, jwkset.HTTPClientStorageOptions{
		Client:                    &shaped,
		Ctx:                       ctx,
		HTTPTimeout:               o.HTTPTimeout,
		NoErrorReturnFirstHTTPReq: true, // start with the JWKS down; fail closed until loaded
		RefreshErrorHandler:       func(_ context.Context, err error) { s.failed(err) },
		RefreshInterval:           o.RefreshInterval,
		Storage:                   store,
	})
	if err != nil {
		return nil, fmt.Errorf("jwks_url: %w", err)
	}
	client2, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:          map[string]jwkset.Storage{o.URL: httpStore},
		RateLimitWaitMax:  o.HTTPTimeout,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(o.UnknownKIDInterval), 1),
	})
	if err != nil {
		return nil, fmt.Errorf("jwks_url: %w", err)
	}
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: client2})
	if err != nil {
		return nil, fmt.Errorf("jwks_url: %w", err)
	}
	s.kf = kf
	return s, nil
}

func (s *jwksSource) succeeded(setFP string) {
	s.mu.Lock()
	s.loaded, s.lastGood, s.lastError = true, time.Now(), nil
	if setFP != s.setFP {
		s.setFP = setFP
		s.gen.Add(1)
	}
	cb := s.onRefresh
	s.mu.Unlock()
	if cb != nil {
		cb(nil)
	}
}

func (s *jwksSource) failed(err error) {
	s.mu.Lock()
	s.lastError = err
	cb := s.onRefresh
	s.mu.Unlock()
	if cb != nil {
		cb(err)
	}
}

func (s *jwksSource) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded
}

// status returns whether keys were ever loaded, the time of the last good
// fetch and the last fetch error (nil after a good fetch).
func (s *jwksSource) status() (bool, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded, s.lastGood, s.lastError
}

func (s *jwksSource) key(ctx context.Context, t *jwt.Token) (ed25519.PublicKey, *Error) {
	kid, ok := t.Header["kid"].(string)
	if !ok || kid == "" {
		return nil, fail(CodeMissingKID, "Workspace authorization token has no kid")
	}
	k, err := s.kf.KeyfuncCtx(ctx)(t)
	if err != nil {
		if errors.Is(err, jwkset.ErrKeyNotFound) || errors.Is(err, context.DeadlineExceeded) ||
			strings.Contains(err.Error(), "rate limiter") {
			loaded, _, lastErr := s.status()
			s.mu.Lock()
			badKey := s.badKIDs[kid]
			s.mu.Unlock()
			switch {
			case badKey:
				return nil, fail(CodeInvalidJWK, "The JWKS key for the token kid is not a usable OKP Ed25519 key")
			case loaded:
				return nil, fail(CodeUnknownKID, "No JWKS key matches the token kid")
			case isInvalidJWKS(lastErr):
				return nil, fail(CodeInvalidJWKS, "The workspace authorization JWKS document is invalid")
			default:
				return nil, fail(CodeJWKSUnavailable, "The workspace authorization JWKS could not be fetched")
			}
		}
		return nil, fail(CodeInvalidJWK, "The JWKS key for the token kid is not a usable Ed25519 key")
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fail(CodeInvalidJWK, "The JWKS key for the token kid is not an OKP Ed25519 key")
	}
	return pub, nil
}

// keySetFingerprint identifies a key set by its kids and public key bytes.
func keySetFingerprint(keys []jwkset.JWK) string {
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		m := k.Marshal()
		parts = append(parts, m.KID+"\x00"+m.KTY.String()+"\x00"+m.X+"\x00"+m.N+"\x00"+m.E+"\x00"+m.Y)
	}
	sort.Strings(parts)
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x01")))
	return string(sum[:])
}

// isInvalidJWKS reports whether a fetch error means the document was fetched
// but is not a valid JWKS (shape, or a key that does not parse), as opposed to
// the endpoint being unreachable or answering an error status.
func isInvalidJWKS(err error) bool {
	return errors.Is(err, errInvalidJWKS) || errors.Is(err, jwkset.ErrJWKValidation) ||
		errors.Is(err, jwkset.ErrKeyUnmarshalParameter) || errors.Is(err, jwkset.ErrInvalidKey) ||
		errors.Is(err, jwkset.ErrPadding)
}

// trackingStorage records successful refreshes: jwkset calls KeyReplaceAll
// only after a document was fetched and every key in it parsed.
type trackingStorage struct {
	*jwkset.MemoryJWKSet
	src *jwksSource
}

func (t *trackingStorage) KeyReplaceAll(ctx context.Context, given []jwkset.JWK) error {
	if err := t.MemoryJWKSet.KeyReplaceAll(ctx, given); err != nil {
		return err
	}
	t.src.succeeded(keySetFingerprint(given))
	return nil
}

// jwksShapeCheck sits in front of jwkset's fetch. A 200 answer whose body
// is not a JSON object with a "keys" list of objects (or is larger than
// MaxJWKSBytes) is refused, so it never replaces the last good keys. Keys
// that are not usable OKP/Ed25519 verification keys (another key type or
// curve, a bad "x") are taken out of the document before jwkset parses it,
// and their kids remembered: a token naming one fails invalid_jwk, while the
// other keys of the same document keep working (as the SDK, which looks a
// key up by kid before judging it).
type jwksShapeCheck struct {
	base http.RoundTripper
	src  *jwksSource
}

func (j jwksShapeCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := j.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKSBytes+1))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if len(body) > MaxJWKSBytes || !gjson.ValidBytes(body) {
		return nil, errInvalidJWKS
	}
	doc := gjson.ParseBytes(body)
	keys := doc.Get("keys")
	if !doc.IsObject() || !keys.IsArray() {
		return nil, errInvalidJWKS
	}
	kept := make([]byte, 0, len(body))
	kept = append(kept, `{"keys":[`...)
	bad := map[string]bool{}
	n := 0
	for _, k := range keys.Array() {
		if !k.IsObject() {
			return nil, errInvalidJWKS
		}
		if !usableEd25519JWK(k) {
			if kid := k.Get("kid"); kid.Type == gjson.String {
				bad[kid.Str] = true
			}
			continue
		}
		if n > 0 {
			kept = append(kept, ',')
		}
		kept = append(kept, k.Raw...)
		n++
	}
	kept = append(kept, "]}"...)
	j.src.mu.Lock()
	j.src.badKIDs = bad
	j.src.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(kept))
	resp.ContentLength = int64(len(kept))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// usableEd25519JWK reports whether a JWK is an OKP Ed25519 public key that
// jwkset parses (kty OKP, crv Ed25519, a valid 32-byte x).
func usableEd25519JWK(k gjson.Result) bool {
	if k.Get("kty").Str != "OKP" || k.Get("crv").Str != "Ed25519" {
		return false
	}
	var m jwkset.JWKMarshal
	if err := json.Unmarshal([]byte(k.Raw), &m); err != nil {
		return false
	}
	jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
	if err != nil {
		return false
	}
	_, ok := jwk.Key().(ed25519.PublicKey)
	return ok
}
