// The gate's provisioned state: what New (new.go) resolved from the
// configuration and built, read by every step of the request path.

package gate

import (
	"context"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/events"
	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// Mode is how /a2a treats non-bootstrap calls.
type Mode int

const (
	ModeToken         Mode = iota // verify a workspace token
	ModeLocal                     // local mode: dispatch without a token
	ModeNotConfigured             // required off outside local mode: fail not_configured
)

// OtherPolicy is what happens to paths outside the known route classes.
type OtherPolicy int

const (
	OtherDeny   OtherPolicy = iota // 404, the agent is never called
	OtherAPIKey                    // API key (read for GET/HEAD, write otherwise)
	OtherPublic                    // passed through
)

// Gate is the provisioned runtime state of one supervaizer_auth handler,
// set once by New (new.go) and read only afterwards; Serve (serve.go) takes each request through it.
type Gate struct {
	// Log is the gate's logger: audit lines and warnings.
	Log *zap.Logger
	// Keys are the transport keys (apikey.go).
	Keys Keys
	// Agents maps each served agent slug to its Studio agent id.
	Agents grants.Agents
	// ServerID is this server's Studio id.
	ServerID string
	// Mode is how /a2a treats non-bootstrap calls.
	Mode Mode
	// Verifier checks workspace tokens; nil unless Mode is ModeToken.
	Verifier *grants.Verifier
	// MaxBody bounds the bodies of the public, events, legacy and other routes.
	MaxBody int64
	// MaxBodyA2A bounds a POST /a2a body.
	MaxBodyA2A int64
	// MaxBodyData bounds a DataResource body.
	MaxBodyData int64
	// BodyTimeout bounds the time to receive a request body.
	BodyTimeout time.Duration
	// ForwardToken keeps the workspace token on forwarded requests.
	ForwardToken bool
	// Verified is how the verified context travels (verified_headers).
	Verified VerifiedForm
	// LegacyAllowed lets the /api/supervaizer/... routes in (with a key).
	LegacyAllowed bool
	// OtherRoutes is the policy of paths outside the route classes.
	OtherRoutes OtherPolicy
	// EventsRequireToken refuses /a2a/events without a workspace token.
	EventsRequireToken bool
	// AuditAllows logs allow decisions too (audit_log all).
	AuditAllows bool
	// Requests maps request_id to verified workspace, for the SSE filter
	// (shared per ServerID).
	Requests *events.Memory
	// Events is the shared upstream event stream; nil unless events_fanout.
	Events *events.Hub
	// Metrics are the gate's collectors (metrics.go).
	Metrics *Metrics
	// Settings are the effective settings, for /_sidecar/status
	// (config/settings.go).
	Settings []config.Setting

	// Contracts is the agents' contract source; nil when registration is off.
	Contracts *registration.Source
	// StopContracts stops Contracts' background refresh.
	StopContracts func()

	// Idem is the idempotency guard; nil when idempotency is off.
	Idem *idempotency.Guard
	// IdemStore is the guard's store, shared across reloads.
	IdemStore IdemStore
	// idemHealth is the store's health as covered calls saw it
	// (storehealth.go, set by IdempotencyObserver): a readiness note while
	// failing.
	idemHealth *storeHealth // nil without idempotency
	// IdemActions are the covered actions besides the setup start action.
	IdemActions map[string]bool
	// RequireIdemKey refuses covered calls without an idempotency_key.
	RequireIdemKey bool
	// MaxRecordBytes bounds a covered answer kept to be recorded.
	MaxRecordBytes int64

	// Refs is the references step; nil without a references block
	// (references.go).
	Refs *RefGate

	// Intro is the token introspection; nil unless configured
	// (introspection.go).
	Intro *Introspector

	// Limits are the rate and concurrency rules; nil without a limits
	// block (limits.go).
	Limits *LimitGate

	// Placeholders, when set, publishes a request's decision facts: lookup
	// answers a placeholder name (placeholders.go). caddymodule maps it on
	// the request's caddy.Replacer (caddymodule/placeholders.go).
	Placeholders func(r *http.Request, lookup func(key string) (any, bool))
	// ProxyErrors classifies the errors of Next; nil: none is classified
	// (a failed forward is 502, its outcome unknown).
	ProxyErrors ProxyErrors
	// Releases give back the shared state the gate holds (request memory,
	// idempotency store, limits state), run by Close in order.
	Releases []func()
}

// IdemStore is what the gate needs of its shared idempotency store beyond
// the guard (caddymodule/idemstore.go).
type IdemStore interface {
	// Begin marks one guard call in progress on the store; done ends it.
	Begin() (done func())
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
}

// ProxyErrors classifies the errors Next (the proxy to the agent) returns
// (caddymodule/proxyerrors.go reads reverse_proxy's).
type ProxyErrors interface {
	// DialFailed reports whether err is a failure to connect to the agent:
	// no byte of the request was sent by that attempt.
	DialFailed(err error) bool
	// Status is the HTTP status err asks for (504 for a timeout), or 0.
	Status(err error) int
}

// Configure sets g's plain settings from c, already checked by Validate
// (config/validate.go), and what r resolved: the body bounds and timeout
// in effect, the header switches, the route policy, the mode, the server
// id, the keys and the agents.
func (g *Gate) Configure(c *config.Config, r *config.Resolved) {
	g.MaxBody, g.MaxBodyA2A, g.MaxBodyData = c.EffectiveBodyBounds()
	g.BodyTimeout = c.EffectiveBodyTimeout()
	g.ForwardToken = c.ForwardToken == nil || *c.ForwardToken
	switch c.VerifiedHeadersSetting() {
	case "off":
		g.Verified = VerifiedOff
	case config.VerifiedFormCompact:
		g.Verified = VerifiedCompact
	default:
		g.Verified = VerifiedEach
	}
	g.EventsRequireToken = c.EventsRequireWorkspaceToken
	g.LegacyAllowed = c.LegacyRoutes != "deny"
	g.AuditAllows = c.AuditLog != "deny"
	switch c.OtherRoutes {
	case "api_key":
		g.OtherRoutes = OtherAPIKey
	case "public":
		g.OtherRoutes = OtherPublic
	default:
		g.OtherRoutes = OtherDeny
	}
	switch r.Mode {
	case config.ModeLocal:
		g.Mode = ModeLocal
	case config.ModeNotConfigured:
		g.Mode = ModeNotConfigured
	default:
		g.Mode = ModeToken
	}
	g.ServerID = r.ServerID
	for _, k := range r.Keys {
		g.Keys = append(g.Keys, NewKey(k.Key, k.Write, k.FP))
	}
	for slug, id := range c.Agents {
		g.Agents[slug] = id
	}
}

// ModeName is the mode in words: token, local or not_configured.
func (g *Gate) ModeName() string {
	switch g.Mode {
	case ModeLocal:
		return "local"
	case ModeNotConfigured:
		return "not_configured"
	}
	return "token"
}

// Close stops the gate's background work (fan-out stream, JWKS refresh,
// card refresh), leaves the body memory budget, and runs Releases, which
// give back the shared state; in-flight requests may still use it, so the
// fields stay set.
func (g *Gate) Close() {
	BodyMemory.Leave(g)
	if g.Events != nil {
		g.Events.Close()
	}
	if g.Verifier != nil {
		g.Verifier.Close()
	}
	if g.Contracts != nil {
		g.StopContracts()
		_ = g.Contracts.Close()
	}
	for _, release := range g.Releases {
		release()
	}
}

// The request headers of the transport key and the workspace token.
const (
	headerAPIKey        = "X-Api-Key"
	headerWorkspaceAuth = "X-Supervaize-Workspace-Authorization"
)

// The hop and hygiene headers the gate reads or removes on every request,
// in canonical form (as the servers store them: Go's HTTP/1 and HTTP/2
// servers and quic-go's HTTP/3 server canonicalise every name), so that
// the hot path indexes the header map with them directly instead of
// canonicalising a constant per call (http.Header's Get, Values, Del).
// TestHeaderConstantsCanonical holds every one of them (and the two above)
// to http.CanonicalHeaderKey.
const (
	headerConnection = "Connection"
	headerUpgrade    = "Upgrade"
	headerTrailer    = "Trailer"
)
