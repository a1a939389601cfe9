package caddymodule

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/events"
	"github.com/supervaize/supervaizer-sidecar/gate"
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

// EnvWorkspaceAuthIssuer is the environment variable of the expected token
// issuer, read when workspace_auth issuer is unset (`supervaizer mint`
// signs with it by default).
const EnvWorkspaceAuthIssuer = envAuthIssuer

// Provision builds the handler's gate.Gate (build: Validate's static
// checks, the environment fallback of every unset setting, the keys, the
// auth mode and verifier, the start-up checks, the sources (introspection,
// registration), the shared state (idempotency store, limits, events hub)
// and the Caddy adapters (placeholders, proxy errors); every problem
// joined, each naming its setting; nothing is kept when one fails), with
// its metrics in Caddy's registry, then logs the start-up warnings about the Caddy
// config (an open admin endpoint, config autosave: startup.go) and about
// logs that would write the credentials (logcheck.go). Caddy calls Validate
// after Provision; build runs the same checks first, so that one start-up
// lists every problem at once.
func (h *Handler) Provision(ctx caddy.Context) error {
	g, err := h.build(ctx.Logger(), ctx.GetMetricsRegistry())
	if err != nil {
		return err
	}
	h.g = g
	warnCaddyConfig(ctx, g.Log)    // admin endpoint, config autosave (startup.go)
	warnUnfilteredLogs(ctx, g.Log) // logs that would write the credentials (logcheck.go)
	return nil
}

// CheckProvision builds the handler exactly as Provision does (the same
// steps and rules, every problem joined), logging through log, then stops
// what it built (background JWKS and card refreshes included) and returns
// the effective settings (secrets as fingerprints, URLs redacted) with the
// problems, and the problems only check reports (CheckOnlyProblems: a
// placeholder agent id, an idempotency store that does not answer).
// `supervaizer check` (caddymodule/cli) calls it.
func (h *Handler) CheckProvision(log *zap.Logger) ([]gate.Setting, error) {
	g, err := h.build(log, nil)
	if g != nil {
		err = errors.Join(append([]error{err}, g.CheckOnlyProblems()...)...) // gate/checkonly.go
		g.Close()
	}
	return h.effective, err
}

// build resolves the settings and builds the gate, logging through log and
// registering metrics in reg (nil: none), in named steps: the settings as
// a gate.Config (config.go) and its static checks (Config.Validate), the
// plain settings (Config.Apply), keys, auth mode and verifier, the
// start-up checks and effective settings (Config.StartupChecks), sources,
// stores. It checks every setting it can and returns all problems
// joined; with any problem the gate is closed and nil.
func (h *Handler) build(log *zap.Logger, reg *prometheus.Registry) (*gate.Gate, error) {
	g := &gate.Gate{Log: log, Agents: grants.Agents{},
		Placeholders: exposePlaceholders, ProxyErrors: proxyErrors{}} // the Caddy adapters (placeholders.go, proxyerrors.go)
	g.Metrics = gate.NewMetrics(reg, gate.JWKSAge(&g.Verifier))
	// Placeholders first, before any setting is read (placeholdersettings.go).
	errs := h.expandPlaceholders()
	cfg := h.config()                      // config.go
	if err := cfg.Validate(); err != nil { // gate/config.go
		errs = append(errs, err)
	}
	cfg.Apply(g) // gate/config.go
	errs = append(errs, h.buildKeys(g)...)
	ra, authErrs := h.buildAuth(g, log, len(errs) == 0)
	errs = append(errs, authErrs...)
	errs = append(errs, cfg.StartupChecks(g, log, ra, gate.EnvValue{Name: envAPIKey, Value: os.Getenv(envAPIKey)})...) // gate/startup.go
	h.effective = g.Settings
	errs = append(errs, h.buildSources(g, log, cfg, len(errs) == 0)...)
	errs = append(errs, h.buildStores(g, log, cfg)...)
	if len(errs) > 0 {
		g.Close()
		return nil, errors.Join(errs...)
	}
	budget := cfg.EffectiveBodyMemory()
	if capacity, differs := gate.BodyMemory.Join(g, budget); differs {
		log.Warn("body_memory differs between the loaded supervaizer_auth handlers: the process holds one budget, the largest",
			zap.Int64("body_memory", budget), zap.Int64("in_force", capacity))
	}
	fps := make([]string, len(g.Keys))
	for i, k := range g.Keys {
		fps[i] = k.FP
	}
	log.Info("supervaizer_auth provisioned",
		zap.String("mode", g.ModeName()),
		zap.String("server_id", g.ServerID),
		zap.Strings("api_key_fingerprints", fps),
		zap.Int("agents", len(g.Agents)))
	return g, nil
}

// Validate makes the static checks, those that need neither I/O nor the
// environment, each naming its setting: gate.Config.Validate
// (gate/config.go: every bound, word and invariant, written once) on the
// settings as written. A Caddyfile reaches them through the JSON it adapts
// to, so both front doors are held to the same rules. build (Provision)
// runs them too, so that one start-up lists every problem at once.
func (h *Handler) Validate() error { return h.config().Validate() }

// buildKeys resolves the transport keys (api_key lines, else
// $SUPERVAIZER_API_KEY with write scope) and the agents. Problems: no key,
// an empty key, a scope other than read or write.
func (h *Handler) buildKeys(g *gate.Gate) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
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
		g.Keys = append(g.Keys, gate.NewKey(k.Key, write, fingerprint(k.Key)))
	}
	for slug, id := range h.Agents {
		g.Agents[slug] = id
	}
	return errs
}

// resolveAuth resolves the workspace authorization settings, each from the
// config, else its environment variable. Problems: a bad boolean in the
// environment (required then counts as on, so that the rest is judged as
// if verification were on), a bad leeway.
func (h *Handler) resolveAuth() (*gate.ResolvedAuth, []error) {
	var errs []error
	local, err := boolSetting(h.LocalMode, envLocalMode, "local_mode")
	if err != nil {
		errs = append(errs, err)
	}
	wa := h.workspaceAuth()
	required, err := boolSetting(wa.Required, envAuthRequired, "workspace_auth required")
	if err != nil {
		errs = append(errs, err)
		required = boolValue{value: true, set: true}
	}
	ra := &gate.ResolvedAuth{Local: local.value, Required: required.value,
		Issuer: strSetting(wa.Issuer, envAuthIssuer), Audience: strSetting(wa.Audience, envAuthAudience),
		PublicKey: strSetting(wa.PublicKey, envAuthPEM), JWKSURL: strSetting(wa.JWKSURL, envAuthJWKS),
		Sources: h.authSources()}
	ra.AnySet = required.set || ra.Issuer != "" || ra.Audience != "" || ra.PublicKey != "" || ra.JWKSURL != ""
	if ra.Leeway, err = leewaySetting(wa.Leeway); err != nil {
		errs = append(errs, err)
	}
	return ra, errs
}

// authSources name where each environment-backed setting comes from
// (gate.ResolvedAuth.Sources).
func (h *Handler) authSources() map[string]string {
	wa := h.workspaceAuth()
	keys := "config"
	if len(h.APIKeys) == 0 {
		keys = "$" + envAPIKey
	}
	return map[string]string{
		"server_id": source(h.ServerID != "", envServerID), "api_key": keys,
		"local_mode":                source(h.LocalMode != nil, envLocalMode),
		"workspace_auth required":   source(wa.Required != nil, envAuthRequired),
		"workspace_auth issuer":     source(wa.Issuer != "", envAuthIssuer),
		"workspace_auth audience":   source(wa.Audience != "", envAuthAudience),
		"workspace_auth public_key": source(wa.PublicKey != "", envAuthPEM),
		"workspace_auth jwks_url":   source(wa.JWKSURL != "", envAuthJWKS),
		"workspace_auth leeway":     source(wa.Leeway != nil, envAuthLeeway),
	}
}

// ResolvedJWKSURL is the JWKS URL Provision uses: workspace_auth jwks_url,
// else $SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL ("" for none).
func (h *Handler) ResolvedJWKSURL() string {
	return strSetting(h.workspaceAuth().JWKSURL, envAuthJWKS)
}

// buildAuth chooses the gate's mode (token, local, not configured), its
// server id and request memory, and in token mode builds the verifier
// (buildVerifier; clean: no earlier step found a problem). Problems: those
// of resolveAuth and buildVerifier, and no server_id outside local mode.
func (h *Handler) buildAuth(g *gate.Gate, log *zap.Logger, clean bool) (*gate.ResolvedAuth, []error) {
	ra, errs := h.resolveAuth()
	g.ServerID = strSetting(h.ServerID, envServerID)
	if g.ServerID == "" && strings.HasPrefix(ra.Audience, grants.AudiencePrefix) {
		g.ServerID = strings.TrimPrefix(ra.Audience, grants.AudiencePrefix)
	}
	g.Requests = acquireRequestMemory(g.ServerID)
	serverID := g.ServerID
	g.Releases = append(g.Releases, func() { releaseRequestMemory(serverID) }) // its key in requestMemories
	switch {
	case ra.Local && !ra.AnySet:
		g.Mode = gate.ModeLocal
		log.Warn("local mode: /a2a calls are dispatched WITHOUT a workspace token; never expose this sidecar outside a developer machine")
	case ra.Required:
		g.Mode = gate.ModeToken
		errs = append(errs, h.buildVerifier(g, log, ra, clean && len(errs) == 0)...)
	default:
		g.Mode = gate.ModeNotConfigured
		if g.ServerID == "" && !ra.Local {
			errs = append(errs, errNoServerID)
		}
		log.Warn("workspace_auth required is off outside local mode: every non-bootstrap call will fail with workspace_authorization_not_configured")
	}
	return ra, errs
}

// errNoServerID is the problem of a gate without a server id outside local mode.
var errNoServerID = fmt.Errorf("supervaizer_auth: no server_id: set server_id or $%s (grants are bound to it)", envServerID)

// buildVerifier checks the token mode settings ra resolved and, when they
// hold and clean (no earlier step found a problem), builds the verifier.
// Problems: no issuer; no key source, or both public_key and jwks_url; no
// server_id; jwks_max_stale without jwks_url or not longer than
// jwks_refresh (grants.JWKSOptions.Validate); a public key that does not load; what grants.NewVerifier
// refuses.
func (h *Handler) buildVerifier(g *gate.Gate, log *zap.Logger, ra *gate.ResolvedAuth, clean bool) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	wa := h.workspaceAuth()
	if ra.Issuer == "" {
		bad("workspace_auth required but no issuer: set workspace_auth issuer or $%s", envAuthIssuer)
	}
	if ra.PublicKey == "" && ra.JWKSURL == "" {
		bad("workspace_auth required but no key source: set workspace_auth public_key or jwks_url ($%s or $%s)", envAuthPEM, envAuthJWKS)
	}
	if ra.PublicKey != "" && ra.JWKSURL != "" {
		bad("workspace_auth public_key and jwks_url are both set: choose one")
	}
	if g.ServerID == "" {
		errs = append(errs, errNoServerID)
	}
	cfg := grants.Config{
		Issuer: ra.Issuer, Audience: ra.Audience, ServerID: g.ServerID,
		Leeway: &ra.Leeway, CacheSize: wa.CacheSize, Observe: g.Metrics.ObserveVerify,
		MaxTokenLifetime: time.Duration(wa.MaxTokenLifetime),
	}
	jwks := jwksOptions(wa, ra.JWKSURL, g.Metrics, log)
	if err := jwks.Validate(); err != nil { // jwks_max_stale: needs jwks_url, longer than jwks_refresh
		bad("workspace_auth %w", err)
	}
	if ra.PublicKey != "" {
		pub, err := grants.LoadPublicKey(ra.PublicKey)
		if err != nil {
			bad("workspace_auth %w", err)
		}
		cfg.PublicKey = pub
	} else if ra.JWKSURL != "" {
		cfg.JWKS = jwks
	}
	if clean && len(errs) == 0 {
		v, err := grants.NewVerifier(cfg)
		if err != nil {
			bad("workspace_auth: %w", err)
		}
		g.Verifier = v
	}
	return errs
}

// buildSources builds the gate's outside sources of truth: introspection,
// then the contract source (registration). The contract source starts
// background work, so it is built only when clean (no earlier problem);
// otherwise its settings are only checked.
func (h *Handler) buildSources(g *gate.Gate, log *zap.Logger, cfg *gate.Config, clean bool) []error {
	var errs []error
	if err := h.provisionIntrospection(g, h.workspaceAuth()); err != nil { // introspection.go
		errs = append(errs, err)
	}
	if clean && len(errs) == 0 {
		if err := cfg.StartContracts(g, log); err != nil { // gate/contracts.go
			errs = append(errs, err)
		}
	} else if _, _, err := cfg.RegistrationKind(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// buildStores builds the gate's shared state: the idempotency store
// (idempotency.go) and, with events_fanout, the events hub.
func (h *Handler) buildStores(g *gate.Gate, log *zap.Logger, cfg *gate.Config) []error {
	var errs []error
	if err := h.provisionIdempotency(g, log); err != nil {
		errs = append(errs, err)
	}
	if err := provisionLimits(g, cfg.Limits, log); err != nil { // limits.go
		errs = append(errs, err)
	}
	if err := provisionReferences(g, cfg, log); err != nil { // references.go
		errs = append(errs, err)
	}
	if cfg.EventsFanout {
		if base, err := cfg.UpstreamURL("events_fanout"); err != nil {
			errs = append(errs, err)
		} else {
			g.Events = events.NewHub(base, g.Requests, log.Named("events"), g.Metrics.Fanout)
			if g.Refs != nil && g.Refs.LearnEvents {
				g.Events.SetLearner(g.LearnEvent) // gate/references.go
			}
		}
	}
	return errs
}

// workspaceAuth is the workspace_auth block, empty when absent.
func (h *Handler) workspaceAuth() *WorkspaceAuth {
	if h.WorkspaceAuth == nil {
		return &WorkspaceAuth{}
	}
	return h.WorkspaceAuth
}

// Cleanup stops the gate's background work and gives back its shared state
// (see gate.close).
func (h *Handler) Cleanup() error {
	if h.g != nil {
		h.g.Close()
	}
	return nil
}

// fingerprint is the log-safe form of a secret (gate.Fingerprint).
func fingerprint(secret string) string { return gate.Fingerprint(secret) }

// jwksOptions are the JWKS source options of wa for url. Each fetch is
// counted (metrics.JWKSFetch, with the failure's reason) and a failure is
// logged at warn: the last good keys are kept, whatever the document said.
func jwksOptions(wa *WorkspaceAuth, url string, m *gate.Metrics, log *zap.Logger) *grants.JWKSOptions {
	return &grants.JWKSOptions{
		URL:                url,
		RefreshInterval:    time.Duration(wa.JWKSRefresh),
		UnknownKIDInterval: time.Duration(wa.JWKSUnknownKIDInterval),
		HTTPTimeout:        time.Duration(wa.JWKSTimeout),
		MaxStale:           time.Duration(wa.JWKSMaxStale),
		OnRefresh: func(err error) {
			m.JWKSFetch(err)
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
// rounded; one outside 0 to gate.MaxLeeway is refused (the config's by
// validate).
func leewaySetting(cfg *caddy.Duration) (time.Duration, error) {
	if cfg == nil {
		v := strings.TrimSpace(os.Getenv(envAuthLeeway))
		if v == "" {
			return grants.DefaultLeeway, nil
		}
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("supervaizer_auth: $%s must be a whole number of seconds, not %q", envAuthLeeway, v)
		}
		if secs < 0 || secs > int64(gate.MaxLeeway/time.Second) {
			return 0, fmt.Errorf("supervaizer_auth: $%s must be between 0 and %d seconds, not %q", envAuthLeeway, int64(gate.MaxLeeway/time.Second), v)
		}
		return time.Duration(secs) * time.Second, nil
	}
	// The range is Validate's (gate/bounds.go); the whole-second rule is the
	// SDK's, shared with the environment variable.
	leeway := time.Duration(*cfg)
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
