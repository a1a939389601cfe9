// The gate's provisioned state: what New (new.go) resolved from the
// configuration and built, read by every step of the request path.

package gate

import (
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
// set once by New (new.go) and read only afterwards; Serve (serve.go)
// takes each request through it. Its state is unexported: nothing outside
// this package writes it.
type Gate struct {
	// log is the gate's logger: audit lines and warnings.
	log *zap.Logger
	// keys are the transport keys (apikey.go).
	keys Keys
	// agents maps each served agent slug to its Studio agent id.
	agents grants.Agents
	// serverID is this server's Studio id.
	serverID string
	// mode is how /a2a treats non-bootstrap calls.
	mode Mode
	// verifier checks workspace tokens; nil unless mode is ModeToken.
	verifier *grants.Verifier
	// maxBody bounds the bodies of the public, events, legacy and other routes.
	maxBody int64
	// maxBodyA2A bounds a POST /a2a body.
	maxBodyA2A int64
	// maxBodyData bounds a DataResource body.
	maxBodyData int64
	// bodyTimeout bounds the time to receive a request body.
	bodyTimeout time.Duration
	// forwardToken keeps the workspace token on forwarded requests.
	forwardToken bool
	// verified is how the verified context travels (verified_headers).
	verified VerifiedForm
	// legacyAllowed lets the /api/supervaizer/... routes in (with a key).
	legacyAllowed bool
	// otherRoutes is the policy of paths outside the route classes.
	otherRoutes OtherPolicy
	// eventsRequireToken refuses /a2a/events without a workspace token.
	eventsRequireToken bool
	// auditAllows logs allow decisions too (audit_log all).
	auditAllows bool
	// heads are log's children holding an audit line's first fields
	// (audit.go, auditHeads).
	heads auditHeads
	// requests maps request_id to verified workspace, for the SSE filter
	// (shared per server id).
	requests *events.Memory
	// events is the shared upstream event stream; nil unless events_fanout.
	events *events.Hub
	// metrics are the gate's collectors (metrics.go).
	metrics *Metrics
	// settings are the effective settings, for /_sidecar/status
	// (config/settings.go).
	settings []config.Setting

	// contracts is the agents' contract source; nil when registration is off.
	contracts *registration.Source
	// stopContracts stops contracts' background refresh.
	stopContracts func()

	// idem is the idempotency guard; nil when idempotency is off.
	idem *idempotency.Guard
	// idemStore is the guard's store, shared across reloads
	// (idempotency/shared.go): check pings it.
	idemStore idempotency.Store
	// idemHealth is the store's health as covered calls saw it
	// (storehealth.go, set by IdempotencyObserver): a readiness note while
	// failing.
	idemHealth *storeHealth // nil without idempotency
	// idemActions are the covered actions besides the setup start action.
	idemActions map[string]bool
	// requireIdemKey refuses covered calls without an idempotency_key.
	requireIdemKey bool
	// maxRecordBytes bounds a covered answer kept to be recorded.
	maxRecordBytes int64

	// refs is the references step; nil without a references block
	// (references.go).
	refs *RefGate

	// intro is the token introspection; nil unless configured
	// (introspection.go, introspectDecision).
	intro *Introspector

	// limits are the rate and concurrency rules; nil without a limits
	// block (limits.go).
	limits *LimitGate

	// placeholders, when set, publishes a request's decision facts: lookup
	// answers a placeholder name (audit.go). caddymodule maps it on
	// the request's caddy.Replacer (caddymodule/handler.go).
	placeholders func(r *http.Request, lookup func(key string) (any, bool))
	// proxyErrors classifies the errors of Next; nil: none is classified
	// (a failed forward is 502, its outcome unknown).
	proxyErrors ProxyErrors
	// releases give back the shared state the gate holds (request memory,
	// idempotency store, limits state), run by Close in order.
	releases []func()
}

// ProxyErrors classifies the errors Next (the proxy to the agent) returns
// (caddymodule/handler.go reads reverse_proxy's).
type ProxyErrors interface {
	// DialFailed reports whether err is a failure to connect to the agent:
	// no byte of the request was sent by that attempt.
	DialFailed(err error) bool
	// Status is the HTTP status err asks for (504 for a timeout), or 0.
	Status(err error) int
}

// configure sets g's plain settings from c, already checked by Validate
// (config/validate.go), and what r resolved: the body bounds and timeout
// in effect, the header switches, the route policy, the mode, the server
// id, the keys and the agents.
func (g *Gate) configure(c *config.Config, r *config.Resolved) {
	g.maxBody, g.maxBodyA2A, g.maxBodyData = c.EffectiveBodyBounds()
	g.bodyTimeout = c.EffectiveBodyTimeout()
	g.forwardToken = c.ForwardToken == nil || *c.ForwardToken
	switch c.VerifiedHeadersSetting() {
	case "off":
		g.verified = VerifiedOff
	case config.VerifiedFormCompact:
		g.verified = VerifiedCompact
	default:
		g.verified = VerifiedEach
	}
	g.eventsRequireToken = c.EventsRequireWorkspaceToken
	g.legacyAllowed = c.LegacyRoutes != "deny"
	g.auditAllows = c.AuditLog != "deny"
	switch c.OtherRoutes {
	case "api_key":
		g.otherRoutes = OtherAPIKey
	case "public":
		g.otherRoutes = OtherPublic
	default:
		g.otherRoutes = OtherDeny
	}
	switch r.Mode {
	case config.ModeLocal:
		g.mode = ModeLocal
	case config.ModeNotConfigured:
		g.mode = ModeNotConfigured
	default:
		g.mode = ModeToken
	}
	g.serverID = r.ServerID
	for _, k := range r.Keys {
		g.keys = append(g.keys, NewKey(k.Key, k.Write, k.FP))
	}
	for slug, id := range c.Agents {
		g.agents[slug] = id
	}
}

// modeName is the mode in words: token, local or not_configured.
func (g *Gate) modeName() string {
	switch g.mode {
	case ModeLocal:
		return config.ModeLocal
	case ModeNotConfigured:
		return config.ModeNotConfigured
	}
	return config.ModeToken
}

// Close stops the gate's background work (fan-out stream, JWKS refresh,
// card refresh), leaves the body memory budget, and runs Releases, which
// give back the shared state; in-flight requests may still use it, so the
// fields stay set.
func (g *Gate) Close() {
	BodyMemory.Leave(g)
	if g.events != nil {
		g.events.Close()
	}
	if g.verifier != nil {
		g.verifier.Close()
	}
	if g.contracts != nil {
		g.stopContracts()
		_ = g.contracts.Close()
	}
	for _, release := range g.releases {
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
