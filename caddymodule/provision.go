package caddymodule

import (
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/events"
	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/grants"
)

// EnvWorkspaceAuthIssuer is the environment variable of the expected token
// issuer, read when workspace_auth issuer is unset (`supervaizer mint`
// signs with it by default).
var EnvWorkspaceAuthIssuer = config.Env("workspace_auth issuer")

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
func (h *Handler) CheckProvision(log *zap.Logger) ([]config.Setting, error) {
	g, err := h.build(log, nil)
	if g != nil {
		err = errors.Join(append([]error{err}, g.CheckOnlyProblems()...)...) // gate/checkonly.go
		g.Close()
	}
	return h.effective, err
}

// build resolves the settings and builds the gate, logging through log and
// registering metrics in reg (nil: none), in named steps: the settings'
// placeholders (placeholdersettings.go), their static checks
// (config.Config.Validate), the environment fallbacks and the mode
// (config.Config.Resolve), the plain settings (gate.Gate.Configure), the
// verifier, the start-up checks and effective settings
// (config/startup.go, config/settings.go), sources, stores. It checks
// every setting it can and returns all problems joined; with any problem
// the gate is closed and nil.
func (h *Handler) build(log *zap.Logger, reg *prometheus.Registry) (*gate.Gate, error) {
	g := &gate.Gate{Log: log, Agents: grants.Agents{},
		Placeholders: exposePlaceholders, ProxyErrors: proxyErrors{}} // the Caddy adapters (placeholders.go, proxyerrors.go)
	g.Metrics = gate.NewMetrics(reg, gate.JWKSAge(&g.Verifier))
	errs := h.expandPlaceholders() // before any setting is read
	cfg := &h.Config
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	r, resolveErrs := cfg.Resolve(log)
	errs = append(errs, resolveErrs...)
	g.Configure(cfg, r)
	g.Requests = acquireRequestMemory(g.ServerID)
	serverID := g.ServerID
	g.Releases = append(g.Releases, func() { releaseRequestMemory(serverID) }) // its key in requestMemories
	if r.Mode == config.ModeToken {
		errs = append(errs, h.buildVerifier(g, log, r.Auth, len(errs) == 0)...)
	}
	errs = append(errs, cfg.StartupChecks(r, log)...)
	g.Settings = cfg.Settings(r)
	h.effective = g.Settings
	errs = append(errs, h.buildSources(g, log, len(errs) == 0)...)
	errs = append(errs, h.buildStores(g, log)...)
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
// environment, each naming its setting: config.Config.Validate (every
// bound, word and invariant, written once) on the settings as written. A
// Caddyfile reaches them through the JSON it adapts to, so both front
// doors are held to the same rules. build (Provision) runs them too, so
// that one start-up lists every problem at once.
func (h *Handler) Validate() error { return h.Config.Validate() }

// buildVerifier checks the token mode settings ra resolved and, when they
// hold and clean (no earlier step found a problem), builds the verifier.
// Problems: no issuer; no key source, or both public_key and jwks_url;
// jwks_max_stale without jwks_url or not longer than
// jwks_refresh (grants.JWKSOptions.Validate); a public key that does not load; what grants.NewVerifier
// refuses.
func (h *Handler) buildVerifier(g *gate.Gate, log *zap.Logger, ra *config.ResolvedAuth, clean bool) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	wa := h.AuthBlock()
	if ra.Issuer == "" {
		bad("workspace_auth required but no issuer: set workspace_auth issuer or $%s", config.Env("workspace_auth issuer"))
	}
	if ra.PublicKey == "" && ra.JWKSURL == "" {
		bad("workspace_auth required but no key source: set workspace_auth public_key or jwks_url ($%s or $%s)",
			config.Env("workspace_auth public_key"), config.Env("workspace_auth jwks_url"))
	}
	if ra.PublicKey != "" && ra.JWKSURL != "" {
		bad("workspace_auth public_key and jwks_url are both set: choose one")
	}
	cfg := grants.Config{
		Issuer: ra.Issuer, Audience: ra.Audience, ServerID: g.ServerID,
		Leeway: &ra.Leeway, CacheSize: wa.CacheSize, Observe: g.Metrics.ObserveVerify,
		MaxTokenLifetime: wa.MaxTokenLifetime.D(),
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
func (h *Handler) buildSources(g *gate.Gate, log *zap.Logger, clean bool) []error {
	var errs []error
	cfg := &h.Config
	if err := provisionIntrospection(g, h.AuthBlock()); err != nil { // introspection.go
		errs = append(errs, err)
	}
	if clean && len(errs) == 0 {
		if err := g.StartContracts(cfg, log); err != nil { // gate/contracts.go
			errs = append(errs, err)
		}
	} else if _, _, err := cfg.RegistrationKind(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// buildStores builds the gate's shared state: the idempotency store
// (idempotency.go) and, with events_fanout, the events hub.
func (h *Handler) buildStores(g *gate.Gate, log *zap.Logger) []error {
	var errs []error
	cfg := &h.Config
	if err := h.provisionIdempotency(g, log); err != nil {
		errs = append(errs, err)
	}
	if err := provisionLimits(g, cfg.Limits.Domain(), log); err != nil { // limits.go
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

// Cleanup stops the gate's background work and gives back its shared state
// (see gate.close).
func (h *Handler) Cleanup() error {
	if h.g != nil {
		h.g.Close()
	}
	return nil
}

// jwksOptions are the JWKS source options of wa for url. Each fetch is
// counted (metrics.JWKSFetch, with the failure's reason) and a failure is
// logged at warn: the last good keys are kept, whatever the document said.
func jwksOptions(wa *config.WorkspaceAuth, url string, m *gate.Metrics, log *zap.Logger) *grants.JWKSOptions {
	return &grants.JWKSOptions{
		URL: url, RefreshInterval: wa.JWKSRefresh.D(), UnknownKIDInterval: wa.JWKSUnknownKIDInterval.D(),
		HTTPTimeout: wa.JWKSTimeout.D(), MaxStale: wa.JWKSMaxStale.D(),
		OnRefresh: func(err error) {
			m.JWKSFetch(err)
			if err != nil {
				log.Warn("JWKS fetch failed; keeping the last good keys", zap.String("jwks_url", redactURL(url)),
					zap.String("reason", grants.JWKSFetchErrorReason(err)), redactErr(err))
			}
		},
	}
}
