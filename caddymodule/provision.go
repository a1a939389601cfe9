package caddymodule

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// Environment variables shared with the Python SDK, so one env set serves
// agent and sidecar (workspace-agent-grants seed, "Stateless Agent Requirement").
const (
	envServerID     = "SUPERVAIZER_SERVER_ID"
	envAPIKey       = "SUPERVAIZER_API_KEY"
	envLocalMode    = "SUPERVAIZER_LOCAL_MODE"
	envAuthRequired = "SUPERVAIZER_WORKSPACE_AUTH_REQUIRED"
	envAuthIssuer   = "SUPERVAIZER_WORKSPACE_AUTH_ISSUER"
	envAuthAudience = "SUPERVAIZER_WORKSPACE_AUTH_AUDIENCE"
	envAuthPEM      = "SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY"
	envAuthJWKS     = "SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL"
	envAuthLeeway   = "SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS"
)

// Default body bounds, in bytes, when max_body is not set (Handler.MaxBody,
// MaxBodyA2A, MaxBodyData; README, "Body limits").
const (
	defaultMaxBody     = 1 << 20  // public, events, legacy and other routes: 1 MiB
	defaultMaxBodyA2A  = 16 << 20 // POST /a2a: 16 MiB (inline file fields)
	defaultMaxBodyData = 16 << 20 // DataResource routes: 16 MiB (bulk imports)
)

// authMode is how /a2a treats non-bootstrap calls.
type authMode int

const (
	modeToken         authMode = iota // verify a workspace token
	modeLocal                         // local mode: dispatch without a token
	modeNotConfigured                 // required off outside local mode: fail not_configured
)

// Provision resolves settings (config, then environment), builds the
// verifier and the route policy. It fails with an error naming the setting
// when: no API key; an API key scope other than read/write; server_id
// missing outside local mode; workspace_auth required without issuer or key
// source; both public_key and jwks_url; a PEM that does not parse or is not
// Ed25519; a bad boolean in the environment; a leeway (config or
// environment) that is not a whole number of seconds; jwks_max_stale
// without jwks_url or not longer than jwks_refresh; an unknown
// legacy_routes / other_routes value; max_body negative; a registration or
// idempotency setting that does not hold. Every problem found is reported
// at once (errors.Join), each naming its setting.
func (h *Handler) Provision(ctx caddy.Context) error {
	g, err := h.build(ctx.Logger(), ctx.GetMetricsRegistry())
	if err != nil {
		return err
	}
	h.g = g
	warnCaddyConfig(ctx, g.log) // admin endpoint, config autosave (startup.go)
	return nil
}

// build resolves the settings and builds the gate, logging through log and
// registering metrics in reg (nil: none). It checks every setting it can and
// returns all problems joined; with any problem the gate is closed and nil.
// `supervaizer check` calls it to list every problem of a config.
func (h *Handler) build(log *zap.Logger, reg *prometheus.Registry) (*gate, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	g := &gate{log: log, maxBody: h.MaxBody, agents: grants.Agents{}}
	g.metrics = newMetrics(reg, jwksAge(&g.verifier))
	// Body bounds: max_body, max_body_a2a, max_body_data (each refused when
	// negative); an unset one is max_body when that is set, else its default.
	g.maxBodyA2A, g.maxBodyData = h.MaxBodyA2A, h.MaxBodyData
	for _, l := range []struct {
		name     string
		v        *int64
		fallback int64
	}{{"max_body", &g.maxBody, defaultMaxBody}, {"max_body_a2a", &g.maxBodyA2A, defaultMaxBodyA2A},
		{"max_body_data", &g.maxBodyData, defaultMaxBodyData}} {
		switch {
		case *l.v < 0:
			bad("%s must be positive", l.name)
		case *l.v == 0 && h.MaxBody > 0:
			*l.v = h.MaxBody
		case *l.v == 0:
			*l.v = l.fallback
		}
	}
	g.bodyTimeout = time.Duration(h.BodyTimeout)
	if g.bodyTimeout <= 0 {
		g.bodyTimeout = 10 * time.Second
	}
	g.forwardToken = h.ForwardToken == nil || *h.ForwardToken
	g.verifiedHeaders = h.VerifiedHeaders == nil || *h.VerifiedHeaders
	g.eventsRequireToken = h.EventsRequireWorkspaceToken

	switch h.LegacyRoutes {
	case "", "allow":
		g.legacyAllowed = true
	case "deny":
	default:
		bad("legacy_routes must be allow or deny, not %q", h.LegacyRoutes)
	}
	switch h.AuditLog {
	case "", "all":
		g.auditAllows = true
	case "deny":
	default:
		bad("audit_log must be all or deny, not %q", h.AuditLog)
	}
	switch h.OtherRoutes {
	case "", "deny":
		g.otherRoutes = otherDeny
	case "api_key":
		g.otherRoutes = otherAPIKey
	case "public":
		g.otherRoutes = otherPublic
	default:
		bad("other_routes must be deny, api_key or public, not %q", h.OtherRoutes)
	}

	// Transport keys.
	keys := h.APIKeys
	if len(keys) == 0 {
		if k := os.Getenv(envAPIKey); k != "" {
			keys = []APIKey{{Key: k, Scope: "write"}}
		}
	}
	if len(keys) == 0 {
		bad("no API key configured: set api_key or $%s", envAPIKey)
	}
	for i, k := range keys {
		if k.Key == "" {
			bad("api_key %d is empty", i+1)
			continue
		}
		var write bool
		switch k.Scope {
		case "", "write":
			write = true
		case "read":
		default:
			bad("api_key %s: scope must be read or write, not %q", fingerprint(k.Key), k.Scope)
			continue
		}
		g.keys = append(g.keys, apiKey{sum: sha256.Sum256([]byte(k.Key)), write: write, fp: fingerprint(k.Key)})
	}

	for slug, id := range h.Agents {
		g.agents[slug] = id
	}

	// Modes and verification.
	local, err := boolSetting(h.LocalMode, envLocalMode, "local_mode")
	if err != nil {
		errs = append(errs, err)
	}
	wa := h.WorkspaceAuth
	if wa == nil {
		wa = &WorkspaceAuth{}
	}
	required, err := boolSetting(wa.Required, envAuthRequired, "workspace_auth required")
	if err != nil {
		errs = append(errs, err)
		required = boolValue{value: true, set: true} // judge the rest as if verification were on
	}
	issuer := strSetting(wa.Issuer, envAuthIssuer)
	audience := strSetting(wa.Audience, envAuthAudience)
	pemValue := strSetting(wa.PublicKey, envAuthPEM)
	jwksURL := strSetting(wa.JWKSURL, envAuthJWKS)
	leeway, err := leewaySetting(wa.Leeway)
	if err != nil {
		errs = append(errs, err)
	}
	anyAuthSetting := required.set || issuer != "" || audience != "" || pemValue != "" || jwksURL != ""

	g.serverID = strSetting(h.ServerID, envServerID)
	if g.serverID == "" && strings.HasPrefix(audience, grants.AudiencePrefix) {
		g.serverID = strings.TrimPrefix(audience, grants.AudiencePrefix)
	}
	g.requests = acquireRequestMemory(g.serverID)

	switch {
	case local.value && !anyAuthSetting:
		g.mode = modeLocal
		log.Warn("local mode: /a2a calls are dispatched WITHOUT a workspace token; never expose this sidecar outside a developer machine")
	case required.value:
		g.mode = modeToken
		if issuer == "" {
			bad("workspace_auth required but no issuer: set workspace_auth issuer or $%s", envAuthIssuer)
		}
		if pemValue == "" && jwksURL == "" {
			bad("workspace_auth required but no key source: set workspace_auth public_key or jwks_url ($%s or $%s)", envAuthPEM, envAuthJWKS)
		}
		if pemValue != "" && jwksURL != "" {
			bad("workspace_auth public_key and jwks_url are both set: choose one")
		}
		if g.serverID == "" {
			bad("no server_id: set server_id or $%s (grants are bound to it)", envServerID)
		}
		cfg := grants.Config{
			Issuer: issuer, Audience: audience, ServerID: g.serverID,
			Leeway: &leeway, CacheSize: wa.CacheSize, Observe: g.metrics.observeVerify,
			MaxTokenLifetime: time.Duration(wa.MaxTokenLifetime),
		}
		if wa.JWKSMaxStale > 0 && jwksURL == "" {
			bad("workspace_auth jwks_max_stale needs jwks_url (a public_key never goes stale)")
		}
		if pemValue != "" {
			pub, err := grants.LoadPublicKey(pemValue)
			if err != nil {
				bad("workspace_auth %v", err)
			}
			cfg.PublicKey = pub
		} else if jwksURL != "" {
			cfg.JWKS = jwksOptions(wa, jwksURL, g.metrics, log)
			if ms := cfg.JWKS.MaxStale; ms > 0 && ms <= refreshOrDefault(cfg.JWKS.RefreshInterval) {
				bad("workspace_auth jwks_max_stale (%v) must be longer than jwks_refresh (%v)", ms, refreshOrDefault(cfg.JWKS.RefreshInterval))
			}
		}
		if len(errs) == 0 {
			v, err := grants.NewVerifier(cfg)
			if err != nil {
				bad("workspace_auth: %v", err)
			}
			g.verifier = v
		}
	default:
		g.mode = modeNotConfigured
		if g.serverID == "" && !local.value {
			bad("no server_id: set server_id or $%s (grants are bound to it)", envServerID)
		}
		log.Warn("workspace_auth required is off outside local mode: every non-bootstrap call will fail with workspace_authorization_not_configured")
	}

	errs = append(errs, h.startupChecks(g, log, resolvedAuth{local: local.value, required: required.value, issuer: issuer,
		audience: audience, publicKey: pemValue, jwksURL: jwksURL, leeway: leeway})...) // startup.go
	if err := h.provisionIntrospection(g, wa); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 { // the sources start background work: only for a valid config
		if err := h.provisionRegistration(g, log); err != nil {
			errs = append(errs, err)
		}
	} else if err := h.checkRegistrationSettings(g); err != nil {
		errs = append(errs, err)
	}
	if err := h.provisionIdempotency(g, log); err != nil {
		errs = append(errs, err)
	}
	if h.EventsFanout {
		if base, err := h.upstreamURL("events_fanout"); err != nil {
			errs = append(errs, err)
		} else {
			g.events = newEventsHub(base, g.requests, log.Named("events"), g.metrics.fanout)
		}
	}
	if len(errs) > 0 {
		g.close()
		return nil, errors.Join(errs...)
	}

	fps := make([]string, len(g.keys))
	for i, k := range g.keys {
		fps[i] = k.fp
	}
	log.Info("supervaizer_auth provisioned",
		zap.String("mode", g.modeName()),
		zap.String("server_id", g.serverID),
		zap.Strings("api_key_fingerprints", fps),
		zap.Int("agents", len(g.agents)))
	return g, nil
}

// Validate is a no-op: Provision already refused every bad setting with an
// error naming it.
func (h *Handler) Validate() error { return nil }

// Cleanup stops the gate's background work and gives back its shared state
// (see gate.close).
func (h *Handler) Cleanup() error {
	if h.g != nil {
		h.g.close()
	}
	return nil
}

// close stops the gate's background work (fan-out stream, JWKS refresh,
// card refresh) and gives back its references to the shared idempotency
// store and request memory, which close when no gate holds them any more.
func (g *gate) close() {
	if g.events != nil {
		g.events.close()
	}
	if g.verifier != nil {
		g.verifier.Close()
	}
	if g.contracts != nil {
		g.stopContracts()
		_ = g.contracts.Close()
	}
	// In-flight requests of this gate may still use both after Cleanup:
	// the fields stay set.
	if g.requests != nil {
		releaseRequestMemory(g.serverID) // its key in requestMemories
	}
	if g.idemStore != nil { // closed when no gate holds it and its forwards have ended
		releaseStore(g.idemStore.identity)
	}
}

// fingerprint is the log-safe form of a secret: the first 8 hex characters
// of its SHA-256.
func fingerprint(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:4])
}

// defaultJWKSRefresh is grants' default JWKS refresh period (grants/keys.go,
// JWKSOptions.RefreshInterval).
const defaultJWKSRefresh = 5 * time.Minute

// refreshOrDefault is the JWKS refresh period jwks_refresh d means (0: the default).
func refreshOrDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return defaultJWKSRefresh
	}
	return d
}

// jwksOptions are the JWKS source options of wa for url. Each fetch is
// counted (metrics.jwksFetch, with the failure's reason) and a failure is
// logged at warn: the last good keys are kept, whatever the document said.
func jwksOptions(wa *WorkspaceAuth, url string, m *metrics, log *zap.Logger) *grants.JWKSOptions {
	return &grants.JWKSOptions{
		URL:                url,
		RefreshInterval:    time.Duration(wa.JWKSRefresh),
		UnknownKIDInterval: time.Duration(wa.JWKSUnknownKIDInterval),
		HTTPTimeout:        time.Duration(wa.JWKSTimeout),
		MaxStale:           time.Duration(wa.JWKSMaxStale),
		OnRefresh: func(err error) {
			m.jwksFetch(err)
			if err != nil {
				log.Warn("JWKS fetch failed; keeping the last good keys", zap.String("jwks_url", redactURL(url)),
					zap.String("reason", grants.JWKSFetchErrorReason(err)), redactErr(err))
			}
		},
	}
}

// leewaySetting resolves workspace_auth leeway: the config's (nil: unset),
// else $SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS, an integer of seconds as
// the SDK reads it (int(...); surrounding spaces allowed), else
// grants.DefaultLeeway (30 s). The SDK's leeway is whole seconds, so a
// leeway with a fraction of a second is refused rather than silently
// rounded; a negative one is refused.
func leewaySetting(cfg *caddy.Duration) (time.Duration, error) {
	if cfg == nil {
		v := strings.TrimSpace(os.Getenv(envAuthLeeway))
		if v == "" {
			return grants.DefaultLeeway, nil
		}
		secs, err := strconv.ParseInt(v, 10, 32)
		if err != nil || secs < 0 {
			return 0, fmt.Errorf("supervaizer_auth: $%s must be a non-negative whole number of seconds, not %q", envAuthLeeway, v)
		}
		return time.Duration(secs) * time.Second, nil
	}
	leeway := time.Duration(*cfg)
	if leeway < 0 {
		return 0, fmt.Errorf("supervaizer_auth: workspace_auth leeway must not be negative, not %v", leeway)
	}
	if leeway%time.Second != 0 {
		return 0, fmt.Errorf("supervaizer_auth: workspace_auth leeway must be a whole number of seconds (as the SDK's $%s), not %v", envAuthLeeway, leeway)
	}
	return leeway, nil
}

type boolValue struct{ value, set bool }

// boolSetting resolves a boolean from the config, else the environment
// variable env (true/false/1/0/yes/no/on/off, case-insensitive).
func boolSetting(cfg *bool, env, name string) (boolValue, error) {
	if cfg != nil {
		return boolValue{value: *cfg, set: true}, nil
	}
	v := strings.TrimSpace(os.Getenv(env))
	if v == "" {
		return boolValue{}, nil
	}
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return boolValue{value: true, set: true}, nil
	case "0", "false", "no", "off":
		return boolValue{value: false, set: true}, nil
	}
	return boolValue{}, fmt.Errorf("supervaizer_auth: %s: $%s=%q is not a boolean", name, env, v)
}

func strSetting(cfg, env string) string {
	if cfg != "" {
		return cfg
	}
	return strings.TrimSpace(os.Getenv(env))
}
