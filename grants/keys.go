package grants

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// MaxJWKSBytes bounds a JWKS document (1 MiB); a larger one is invalid.
const MaxJWKSBytes = 1 << 20

// LoadPublicKey reads an Ed25519 public key from value, which is either an
// inline PEM (it contains "-----BEGIN") or the path of a PEM file. The PEM
// must hold one PKIX SubjectPublicKeyInfo ("PUBLIC KEY") block. An inline
// PEM with no line break but literal two-character "\n" sequences (as .env
// files and some secret stores write a multi-line value) has them read as
// line breaks.
//
// Errors: the file cannot be read; no PEM block; the block does not parse as
// PKIX; the key is not Ed25519. Each message names the problem, never the key.
func LoadPublicKey(value string) (ed25519.PublicKey, error) {
	data := []byte(value)
	if strings.Contains(value, "-----BEGIN") && !strings.ContainsAny(value, "\r\n") && strings.Contains(value, `\n`) {
		data = []byte(strings.ReplaceAll(strings.ReplaceAll(value, `\r\n`, "\n"), `\n`, "\n"))
	}
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

// keySource returns the verification key for a parsed token, or a *refusal.Refusal.
// refresh is VerifyOptions.RefreshUnknownKID.
type keySource interface {
	key(ctx context.Context, h tokenHeader, refresh bool) (ed25519.PublicKey, *refusal.Refusal)
	ready() bool
}

type pemSource struct{ pub ed25519.PublicKey }

func (p pemSource) key(context.Context, tokenHeader, bool) (ed25519.PublicKey, *refusal.Refusal) {
	return p.pub, nil
}
func (p pemSource) ready() bool { return true }

// Defaults of JWKSOptions and Config (the gate's workspace_auth block
// shows and documents them: docs/directives.md, "Directive reference").
const (
	DefaultJWKSRefresh            = 5 * time.Minute  // JWKSOptions.RefreshInterval
	DefaultJWKSUnknownKIDInterval = 30 * time.Second // JWKSOptions.UnknownKIDInterval
	DefaultJWKSTimeout            = 5 * time.Second  // JWKSOptions.HTTPTimeout
	DefaultCacheSize              = 10000            // Config.CacheSize (verified-token cache entries)
)

// JWKSOptions configure a JWKS key source. Durations are wall-clock.
type JWKSOptions struct {
	URL string
	// RefreshInterval is the background refresh period (default
	// DefaultJWKSRefresh, 5 min).
	RefreshInterval time.Duration
	// UnknownKIDInterval is the minimum time between refreshes triggered by an
	// unknown kid (default DefaultJWKSUnknownKIDInterval, 30 s); at most one fetch runs at a time (a call
	// that finds one running waits for it), and a call that would have to
	// wait longer than HTTPTimeout for the next one fails with unknown_kid at
	// once. Only calls with VerifyOptions.RefreshUnknownKID trigger one.
	UnknownKIDInterval time.Duration
	// HTTPTimeout bounds one JWKS fetch (default DefaultJWKSTimeout, 5 s),
	// and the time a call waits for a refresh it triggered.
	HTTPTimeout time.Duration
	// MaxStale, if positive, is how long the keys of the last good fetch keep
	// verifying without a newer good fetch: past it, tokens fail
	// jwks_unavailable (cached ones included) and Ready is false until a
	// fetch succeeds. 0 (default): the last good keys are kept indefinitely,
	// as the SDK keeps its cached keys.
	MaxStale time.Duration
	// Client is the HTTP client (default: a new client with HTTPTimeout).
	// Whatever the client, a redirect is never followed: a 3xx answer is a
	// failed fetch ("http_status"), so the keys always come from URL's host.
	Client *http.Client
	// OnRefresh is called after each fetch with nil or the error (may be nil);
	// JWKSFetchErrorReason classifies the error.
	OnRefresh func(err error)
}

// Validate returns the problem between o's settings that needs no I/O,
// named as the gate's workspace_auth block names them: MaxStale without a
// URL (a public key never goes stale), or not longer than the refresh
// period in effect (the keys would go stale between two good refreshes).
// nil when they hold. The URL itself is checked by NewVerifier.
func (o JWKSOptions) Validate() error {
	switch {
	case o.MaxStale <= 0:
		return nil
	case o.URL == "":
		return errors.New("jwks_max_stale needs jwks_url (a public_key never goes stale)")
	case o.MaxStale <= o.refresh():
		return fmt.Errorf("jwks_max_stale (%v) must be longer than jwks_refresh (%v)", o.MaxStale, o.refresh())
	}
	return nil
}

// refresh is the refresh period in effect: RefreshInterval, else
// DefaultJWKSRefresh.
func (o JWKSOptions) refresh() time.Duration {
	if o.RefreshInterval <= 0 {
		return DefaultJWKSRefresh
	}
	return o.RefreshInterval
}

// jwksSource keeps the keys of the last good JWKS document in a jwkset
// memory store read through keyfunc, and fetches documents itself: one fetch
// at a time, detached from the requests that wait for it, never replacing
// the keys with a document that has no usable Ed25519 key.
type jwksSource struct {
	url      string
	client   *http.Client
	timeout  time.Duration
	maxStale time.Duration
	now      func() time.Time
	limiter  *rate.Limiter   // unknown-kid refreshes
	base     context.Context // cancelled by Verifier.Close: ends fetches and the refresh loop
	store    jwkset.Storage
	kf       keyfunc.Keyfunc
	// gen changes whenever a refresh installs a different key set, so that
	// verified-token cache entries made with an older set are verified again
	// (a key removed by rotation stops working at the next refresh).
	gen atomic.Uint64
	// lastGoodNano is the time (Unix ns, from now) of the last good fetch; 0: never.
	lastGoodNano atomic.Int64

	mu        sync.Mutex
	setFP     string            // guarded by mu
	badKIDs   map[string]string // kid -> the SDK's invalid_jwk text, for the last applied document's unusable keys; guarded by mu
	loaded    bool
	lastGood  time.Time
	lastError error
	flight    *fetchFlight // the fetch in progress, or nil
	onRefresh func(error)
}

// fetchFlight is one JWKS fetch; err is set before done is closed.
type fetchFlight struct {
	done chan struct{}
	err  error
}

var (
	// errInvalidJWKS marks a fetched document that is not {"keys":[{...},...]}.
	errInvalidJWKS = errors.New("JWKS document is not an object with a keys list of objects")
	// errJWKSKeyNotObject is errInvalidJWKS for a keys list holding
	// something other than an object (the SDK's second invalid_jwks text).
	errJWKSKeyNotObject = fmt.Errorf("%w: a key is not an object", errInvalidJWKS)
	// errNoUsableJWK marks a document without one usable OKP/Ed25519 key: it
	// never replaces the last good keys.
	errNoUsableJWK = errors.New("JWKS document has no usable OKP Ed25519 key with a kid")
	// errJWKSStatus marks an answer other than 200.
	errJWKSStatus = errors.New("JWKS endpoint answered")
)

// JWKSFetchErrorReason classifies a JWKS fetch error (as passed to
// JWKSOptions.OnRefresh) for a metric label: "no_usable_key" (a document
// without a usable Ed25519 key), "invalid_document" (not a JWKS, over
// MaxJWKSBytes), "http_status" (not 200), "unreachable" (transport error or
// timeout); "" for nil.
func JWKSFetchErrorReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errNoUsableJWK):
		return "no_usable_key"
	case errors.Is(err, errInvalidJWKS):
		return "invalid_document"
	case errors.Is(err, errJWKSStatus):
		return "http_status"
	}
	return "unreachable"
}

// newJWKSSource makes the source, runs the first fetch (bounded by
// HTTPTimeout; a failure is not an error) and starts the background refresh,
// which stops when ctx ends. now is the clock of staleness.
func newJWKSSource(ctx context.Context, o JWKSOptions, now func() time.Time) (*jwksSource, error) {
	o.RefreshInterval = o.refresh()
	if o.UnknownKIDInterval <= 0 {
		o.UnknownKIDInterval = DefaultJWKSUnknownKIDInterval
	}
	if o.HTTPTimeout <= 0 {
		o.HTTPTimeout = DefaultJWKSTimeout
	}
	if u, err := url.ParseRequestURI(o.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("jwks_url: not an http(s) URL")
	}
	client := o.Client
	if client == nil {
		client = &http.Client{Timeout: o.HTTPTimeout}
	}
	s := &jwksSource{url: o.URL, client: client, timeout: o.HTTPTimeout, maxStale: o.MaxStale, now: now,
		limiter: rate.NewLimiter(rate.Every(o.UnknownKIDInterval), 1), base: ctx,
		store: jwkset.NewMemoryStorage(), onRefresh: o.OnRefresh}
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: s.store})
	if err != nil {
		return nil, fmt.Errorf("jwks_url: %w", err)
	}
	s.kf = kf
	<-s.startFetch().done
	go s.refreshLoop(o.RefreshInterval)
	return s, nil
}

// refreshLoop fetches the document every interval until s.base ends.
func (s *jwksSource) refreshLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.base.Done():
			return
		case <-t.C:
			<-s.startFetch().done
		}
	}
}

// startFetch joins the fetch in progress, or starts one in its own goroutine
// under s.base and HTTPTimeout: no request's context can cancel it.
func (s *jwksSource) startFetch() *fetchFlight {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flight != nil {
		return s.flight
	}
	f := &fetchFlight{done: make(chan struct{})}
	s.flight = f
	go func() {
		ctx, cancel := context.WithTimeout(s.base, s.timeout)
		err := s.fetch(ctx)
		cancel()
		s.mu.Lock()
		s.flight = nil
		s.mu.Unlock()
		f.err = err
		close(f.done)
	}()
	return f
}

// wait waits for f, or for ctx to end (the fetch goes on).
func (s *jwksSource) wait(ctx context.Context, f *fetchFlight) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refreshForCall is the refresh an unknown kid (or stale keys) may trigger:
// it joins a fetch in progress, else starts one if the unknown-kid limiter
// grants one within HTTPTimeout; it waits at most HTTPTimeout in all (the
// fetch itself is detached from ctx).
func (s *jwksSource) refreshForCall(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	s.mu.Lock()
	f := s.flight
	s.mu.Unlock()
	if f == nil {
		r := s.limiter.Reserve()
		if d := r.Delay(); d > 0 {
			deadline, _ := ctx.Deadline()
			if time.Now().Add(d).After(deadline) {
				r.Cancel()
				return
			}
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				r.Cancel()
				return
			}
		}
		f = s.startFetch()
	}
	_ = s.wait(ctx, f)
}

// fetch downloads and applies one document: a good one (at least one usable
// key) replaces the keys; any other outcome is recorded as the last error
// and leaves the keys as they are. OnRefresh is called either way, unless
// the source was closed meanwhile.
func (s *jwksSource) fetch(ctx context.Context) error {
	keys, bad, err := s.download(ctx)
	if s.base.Err() != nil {
		return err // closed (a config reload or stop): nothing to record or report
	}
	if err == nil && len(keys) == 0 {
		err = errNoUsableJWK
	}
	if err == nil {
		err = s.store.KeyReplaceAll(context.WithoutCancel(ctx), keys)
	}
	now := s.now()
	s.mu.Lock()
	if err == nil {
		s.loaded, s.lastGood, s.lastError, s.badKIDs = true, now, nil, bad
		s.lastGoodNano.Store(now.UnixNano())
		if fp := keySetFingerprint(keys); fp != s.setFP {
			s.setFP = fp
			s.gen.Add(1)
		}
	} else {
		s.lastError = err
		if errors.Is(err, errNoUsableJWK) && !s.loaded {
			s.badKIDs = bad // nothing to keep: answer from this document (invalid_jwk for its kids)
		}
	}
	cb := s.onRefresh
	s.mu.Unlock()
	if cb != nil {
		cb(err)
	}
	return err
}

func (s *jwksSource) ready() bool {
	s.mu.Lock()
	loaded := s.loaded
	s.mu.Unlock()
	return loaded && !s.stale()
}

// stale reports whether MaxStale is set and the last good fetch is older.
func (s *jwksSource) stale() bool {
	if s.maxStale <= 0 {
		return false
	}
	last := s.lastGoodNano.Load()
	return last != 0 && s.now().Sub(time.Unix(0, last)) > s.maxStale
}

// status returns whether keys were ever loaded, the time of the last good
// fetch and the last fetch error (nil after a good fetch).
func (s *jwksSource) status() (bool, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded, s.lastGood, s.lastError
}

func (s *jwksSource) key(ctx context.Context, h tokenHeader, refresh bool) (ed25519.PublicKey, *refusal.Refusal) {
	kid := h.kid
	if !h.kidString || kid == "" {
		return nil, fail(CodeMissingKID, "Workspace authorization token has no kid")
	}
	// keyfunc reads the header's alg and kid (strings here).
	t := &jwt.Token{Header: map[string]any{"alg": h.alg, "kid": kid}}
	if s.stale() {
		if refresh {
			s.refreshForCall(ctx)
		}
		if s.stale() {
			return nil, fail(CodeJWKSUnavailable, "The workspace authorization JWKS could not be fetched")
		}
	}
	k, err := s.kf.Keyfunc(t)
	if err != nil && errors.Is(err, jwkset.ErrKeyNotFound) && refresh {
		s.refreshForCall(ctx)
		k, err = s.kf.Keyfunc(t)
	}
	if err != nil {
		if errors.Is(err, jwkset.ErrKeyNotFound) {
			return nil, s.missing(kid)
		}
		return nil, fail(CodeInvalidJWK, "The JWKS key for the token kid is not a usable Ed25519 key")
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fail(CodeInvalidJWK, "The JWKS key for the token kid is not an OKP Ed25519 key")
	}
	return pub, nil
}

// missing is the error for a kid not among the usable keys, per the state
// of the source: invalid_jwk (the document's key with that kid is unusable),
// unknown_kid (a document was read), invalid_jwks (the only documents read
// were not JWKS), jwks_unavailable (none could be fetched).
func (s *jwksSource) missing(kid string) *refusal.Refusal {
	s.mu.Lock()
	badKey, loaded, lastErr := s.badKIDs[kid], s.loaded, s.lastError
	s.mu.Unlock()
	switch {
	case badKey != "":
		return failText(CodeInvalidJWK, badKey, "The JWKS key for the token kid is not a usable OKP Ed25519 key")
	case errors.Is(lastErr, errJWKSKeyNotObject):
		// The SDK reads the document it just fetched: a key that is not
		// an object is invalid_jwks, even if an earlier document was good.
		return failText(CodeInvalidJWKS, MsgJWKSKeyNotObject, "The workspace authorization JWKS document is invalid")
	case errors.Is(lastErr, errInvalidJWKS):
		return fail(CodeInvalidJWKS, "The workspace authorization JWKS document is invalid")
	case loaded, errors.Is(lastErr, errNoUsableJWK):
		return fail(CodeUnknownKID, "No JWKS key matches the token kid")
	default:
		return fail(CodeJWKSUnavailable, "The workspace authorization JWKS could not be fetched")
	}
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

// download GETs the document and splits its keys (parseJWKS). Errors:
// transport or timeout; errJWKSStatus (not 200); those of parseJWKS.
func (s *jwksSource) download(ctx context.Context) ([]jwkset.JWK, map[string]string, error) {
	body, err := getJWKS(ctx, s.client, s.url)
	if err != nil {
		return nil, nil, err
	}
	return parseJWKS(body)
}

// getJWKS GETs the document at url with client, never following a
// redirect: a JWKS is trusted for the host configured, so a 3xx answer is
// errJWKSStatus like any other status but 200 (an authorization proxy must
// not fetch its keys wherever an answer points). Errors: transport or
// timeout; errJWKSStatus (not 200); errInvalidJWKS (over MaxJWKSBytes).
func getJWKS(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, redact.Error(err)
	}
	noRedirect := *client // the caller's transport and timeout, its redirect policy replaced
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noRedirect.Do(req)
	if err != nil {
		return nil, redact.Error(err) // net/http's error embeds the full URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w HTTP %d", errJWKSStatus, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKSBytes+1))
	if err != nil {
		return nil, redact.Error(err)
	}
	if len(body) > MaxJWKSBytes {
		return nil, errInvalidJWKS
	}
	return body, nil
}

// parseJWKS splits the keys of a JWKS document: the usable OKP/Ed25519
// verification keys with a kid, and the kids of the others (another key
// type or curve, a bad "x") with the SDK's invalid_jwk text for each
// (jwkProblem), so that a token naming one fails invalid_jwk while the other
// keys of the same document keep working (as the SDK, which looks a key up
// by kid before judging it). Errors: errInvalidJWKS (over MaxJWKSBytes, not
// JSON, not an object with a "keys" list), errJWKSKeyNotObject (a key that
// is not an object).
func parseJWKS(body []byte) ([]jwkset.JWK, map[string]string, error) {
	if len(body) > MaxJWKSBytes || !gjson.ValidBytes(body) {
		return nil, nil, errInvalidJWKS
	}
	doc := gjson.ParseBytes(body)
	list := doc.Get("keys")
	if !doc.IsObject() || !list.IsArray() {
		return nil, nil, errInvalidJWKS
	}
	var keys []jwkset.JWK
	bad := map[string]string{}
	for _, k := range list.Array() {
		if !k.IsObject() {
			return nil, nil, errJWKSKeyNotObject
		}
		jwk, ok := usableEd25519JWK(k)
		if !ok || jwk.Marshal().KID == "" { // no token can name a key without a kid
			if kid := k.Get("kid"); kid.Type == gjson.String {
				bad[kid.Str] = jwkProblem(k)
			}
			continue
		}
		keys = append(keys, jwk)
	}
	return keys, bad, nil
}

// JWKSKeys are the key ids of a JWKS document as a Verifier reads it.
type JWKSKeys struct {
	// Usable are the kids of the keys that verify tokens (OKP Ed25519
	// verification keys with a kid), in document order.
	Usable []string
	// Unusable are the kids of the other keys (another type, curve, alg or
	// use, a bad or private key), sorted: a token naming one fails invalid_jwk.
	Unusable []string
}

// ParseJWKS reads a JWKS document with the rule of a Verifier's JWKS
// source. Errors (classified by JWKSFetchErrorReason): not a JWKS
// ("invalid_document": over MaxJWKSBytes, not JSON, not an object with a
// "keys" list of objects); no usable key ("no_usable_key", such a document
// never replaces the last good keys).
func ParseJWKS(body []byte) (JWKSKeys, error) {
	keys, bad, err := parseJWKS(body)
	if err != nil {
		return JWKSKeys{}, err
	}
	var out JWKSKeys
	for _, k := range keys {
		out.Usable = append(out.Usable, k.Marshal().KID)
	}
	for kid := range bad {
		out.Unusable = append(out.Unusable, kid)
	}
	sort.Strings(out.Unusable)
	if len(keys) == 0 {
		return out, errNoUsableJWK
	}
	return out, nil
}

// FetchJWKS fetches the JWKS document at url once with client, as a
// Verifier's JWKS source does (a redirect is not followed), and reads it
// with ParseJWKS. Errors: transport or timeout ("unreachable"), an answer
// other than 200, a redirect included ("http_status"), and those of
// ParseJWKS (JWKSFetchErrorReason).
func FetchJWKS(ctx context.Context, client *http.Client, url string) (JWKSKeys, error) {
	body, err := getJWKS(ctx, client, url)
	if err != nil {
		return JWKSKeys{}, err
	}
	return ParseJWKS(body)
}

// jwkProblem is the SDK's invalid_jwk text for an unusable key, in the
// SDK's order of checks: not OKP/Ed25519; no "x" (or not a non-empty
// string); an "x" that is not base64url of 32 bytes. A key the SDK would
// accept but the sidecar does not (alg, use or key_ops for another purpose)
// gets the first text.
func jwkProblem(k gjson.Result) string {
	x := k.Get("x")
	switch {
	case k.Get("kty").Str != "OKP" || k.Get("crv").Str != "Ed25519":
		return Message(CodeInvalidJWK)
	case x.Type != gjson.String || x.Str == "":
		return MsgJWKNoX
	}
	if b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(x.Str, "=")); err != nil || len(b) != ed25519.PublicKeySize {
		return MsgJWKBadX
	}
	return Message(CodeInvalidJWK)
}

// usableEd25519JWK parses a JWK that is an OKP Ed25519 public key jwkset
// accepts (kty OKP, crv Ed25519, a valid 32-byte x) and that is meant for
// verifying EdDSA signatures: "alg", when present, is EdDSA (or the fully
// specified Ed25519); "use", when present, is "sig"; "key_ops", when
// present, includes "verify". ok is false otherwise, so a document whose
// only key is marked for another algorithm or for encryption counts as
// keyless and never replaces the last good keys (the SDK's JWKS client also
// skips keys whose use is not sig, and cannot build an RS256 key from OKP
// data).
func usableEd25519JWK(k gjson.Result) (jwkset.JWK, bool) {
	if k.Get("kty").Str != "OKP" || k.Get("crv").Str != "Ed25519" {
		return jwkset.JWK{}, false
	}
	if alg := k.Get("alg"); alg.Exists() && alg.Str != "EdDSA" && alg.Str != "Ed25519" {
		return jwkset.JWK{}, false
	}
	if use := k.Get("use"); use.Exists() && use.Str != "sig" {
		return jwkset.JWK{}, false
	}
	if ops := k.Get("key_ops"); ops.Exists() {
		verify := false
		for _, op := range ops.Array() {
			verify = verify || op.Str == "verify"
		}
		if !verify {
			return jwkset.JWK{}, false
		}
	}
	var m jwkset.JWKMarshal
	if err := json.Unmarshal([]byte(k.Raw), &m); err != nil {
		return jwkset.JWK{}, false
	}
	jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
	if err != nil {
		return jwkset.JWK{}, false
	}
	if _, ok := jwk.Key().(ed25519.PublicKey); !ok {
		return jwkset.JWK{}, false
	}
	return jwk, true
}
