// Package introspection asks a token's issuer whether a verified workspace
// token is still active (RFC 7662, OAuth 2.0 Token Introspection), so a grant
// revoked in Studio stops the high-risk calls before the token expires
// (workspace-agent-grants seed: "immediately for operations that use
// introspection"; "If introspection is enabled and Studio cannot confirm the
// grant, the request fails closed").
//
// A Client POSTs token=<jwt> (application/x-www-form-urlencoded) to the
// endpoint with HTTP Basic client authentication or a bearer token, within a
// timeout, on a context detached from the caller's cancellation. Answers are
// cached by SHA-256 of the token in a bounded LRU (no background goroutine:
// expiry is checked on read): an active answer for CacheTTL but never past
// the token's exp, an inactive one for NegativeCacheTTL; failures are not
// cached. Concurrent checks of one token share one call. The token and the
// client credentials never appear in an error; a redirect is never
// followed (it is a failed call).
//
// Which calls are introspected is the Client's rule too: Covers matches a
// target (action name, surface id, resource scope) against Config.Actions,
// by default DefaultActions (targets.go).
package introspection

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	"github.com/supervaize/supervaizer-sidecar/pattern"
)

// Defaults of Config.
const (
	DefaultTimeout          = 2 * time.Second
	DefaultCacheTTL         = 10 * time.Second
	DefaultNegativeCacheTTL = 2 * time.Second
	DefaultCacheSize        = 10_000
	// MaxResponseBytes bounds an endpoint's answer; a longer one is malformed.
	MaxResponseBytes = 64 << 10
)

// ErrUnavailable wraps every failure to get a usable answer: transport
// error, timeout, a status other than 200, a body that is not an RFC 7662
// JSON object with a boolean "active" (or whose grant_id, workspace_id or
// scope is not a string), the caller's context ending first. Callers fail
// closed on it.
var ErrUnavailable = errors.New("introspection unavailable")

// Config configures a Client. URL is required; ClientID/ClientSecret (HTTP
// Basic) and Bearer are exclusive (Bearer wins when both are set).
type Config struct {
	URL                    string
	ClientID, ClientSecret string
	Bearer                 string
	Timeout                time.Duration // one call, default DefaultTimeout
	CacheTTL               time.Duration // active answers, default DefaultCacheTTL
	NegativeCacheTTL       time.Duration // inactive answers, default DefaultNegativeCacheTTL
	CacheSize              int           // entries, default DefaultCacheSize
	// Actions are the covered targets (Covers): action names, surface ids
	// or resource scopes, "*" standing for exactly one dot-separated
	// segment (pattern/); no namespace. Default: DefaultActions.
	Actions []string
	// Transport carries the calls (default: a clone of http.DefaultTransport).
	Transport http.RoundTripper
	// Observe, if set, is told of each call to the endpoint: its result
	// ("active", "inactive" or "error") and latency.
	Observe func(result string, d time.Duration)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Expect is what the verified token says. A response that carries
// grant_id, workspace_id or scope must agree with it (scope: the same set
// of space-separated scopes), else the verdict is Mismatch.
type Expect struct {
	GrantID     string
	WorkspaceID string
	Scopes      []string
	ExpiresAt   time.Time // the token's exp: an active answer is never cached past it
}

// Result is an introspection verdict.
type Result int

const (
	Active   Result = iota + 1 // active and agreeing with the token
	Inactive                   // {"active": false}
	Mismatch                   // active, but grant_id / workspace_id / scope differ from the token
)

func (r Result) String() string {
	switch r {
	case Active:
		return "active"
	case Inactive:
		return "inactive"
	case Mismatch:
		return "mismatch"
	}
	return ""
}

// Verdict is the outcome of Check and where it came from: "hit" (cache),
// "miss" (this check called the endpoint) or "shared" (this check waited for
// a concurrent call of the same token).
type Verdict struct {
	Result Result
	Source string
}

// Client introspects tokens. It is safe for concurrent use.
type Client struct {
	cfg     Config
	covered pattern.Set // the parsed Config.Actions (targets.go)
	http    *http.Client
	cache   *lru.Cache[[sha256.Size]byte, answer]
	calls   singleflight.Group

	mu     sync.Mutex
	health Health
}

// Health is the endpoint's recent record: consecutive failed calls (0 after
// a good one), when the last failure and the last good call happened, and
// the last failure's reason (no token, no secret).
type Health struct {
	ConsecutiveFailures int
	LastFailure         time.Time
	LastGood            time.Time
	LastError           string
}

// answer is one endpoint answer, as cached.
type answer struct {
	active               bool
	grantID, workspaceID *string // nil when absent
	scope                *string
	expires              time.Time
}

// New builds a Client; it fails on an empty URL, a bad bound, or a
// malformed or namespaced pattern in Actions (each error starts
// "introspection").
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("introspection url is required")
	}
	if cfg.Timeout < 0 || cfg.CacheTTL < 0 || cfg.NegativeCacheTTL < 0 || cfg.CacheSize < 0 {
		return nil, errors.New("introspection timeout, cache_ttl, negative_cache_ttl and cache_size must not be negative")
	}
	covered, err := parseActions(cfg.Actions)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.NegativeCacheTTL == 0 {
		cfg.NegativeCacheTTL = DefaultNegativeCacheTTL
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	tr := cfg.Transport
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	cache, err := lru.New[[sha256.Size]byte, answer](cfg.CacheSize)
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, covered: covered, cache: cache, http: &http.Client{
		Transport: tr,
		// A redirect is not an answer: it is reported as its own status.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// Check tells whether token (already verified by the caller) is still
// active and agrees with want. The error wraps ErrUnavailable; the verdict's
// Source is set in both cases.
func (c *Client) Check(ctx context.Context, token string, want Expect) (Verdict, error) {
	key := sha256.Sum256([]byte(token))
	now := c.cfg.Now()
	if a, ok := c.cache.Get(key); ok && now.Before(a.expires) {
		return Verdict{Result: a.verdict(want), Source: "hit"}, nil
	}
	led := false
	ch := c.calls.DoChan(string(key[:]), func() (any, error) {
		led = true
		// Detached from the caller: a client that goes away does not fail
		// the others waiting on this call.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
		defer cancel()
		a, err := c.call(cctx, token)
		if err != nil {
			return answer{}, err
		}
		a.expires = c.expiry(a.active, want.ExpiresAt)
		c.cache.Add(key, a)
		return a, nil
	})
	select {
	case res := <-ch:
		src := "shared"
		if led {
			src = "miss"
		}
		if res.Err != nil {
			return Verdict{Source: src}, res.Err
		}
		return Verdict{Result: res.Val.(answer).verdict(want), Source: src}, nil
	case <-ctx.Done():
		return Verdict{Source: "shared"}, errors.Join(ErrUnavailable, ctx.Err())
	}
}

// expiry is when a fresh answer leaves the cache: CacheTTL (never past the
// token's exp) when active, NegativeCacheTTL otherwise.
func (c *Client) expiry(active bool, tokenExp time.Time) time.Time {
	now := c.cfg.Now()
	if !active {
		return now.Add(c.cfg.NegativeCacheTTL)
	}
	exp := now.Add(c.cfg.CacheTTL)
	if !tokenExp.IsZero() && tokenExp.Before(exp) {
		exp = tokenExp
	}
	return exp
}

// Health returns the endpoint's recent record.
func (c *Client) Health() Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health
}

func (c *Client) record(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	if err == nil {
		c.health.ConsecutiveFailures, c.health.LastGood = 0, now
		return
	}
	c.health.ConsecutiveFailures++
	c.health.LastFailure, c.health.LastError = now, err.Error()
}

// verdict judges a against the verified token.
func (a answer) verdict(want Expect) Result {
	if !a.active {
		return Inactive
	}
	if a.grantID != nil && *a.grantID != want.GrantID ||
		a.workspaceID != nil && *a.workspaceID != want.WorkspaceID ||
		a.scope != nil && !sameScopes(*a.scope, want.Scopes) {
		return Mismatch
	}
	return Active
}
