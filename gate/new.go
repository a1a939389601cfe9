// The gate's constructor: New resolves a configuration (config/) and
// builds everything Caddy-free from it (the verifier, introspection, the
// contract source, the idempotency guard, the limiter, the references
// step, the events hub), over what only the host has, passed in as Deps:
// the logger, the metrics registry, the placeholder and proxy-error
// adapters, and the state shared across reloads (Shared, Caddy's usage
// pools in caddymodule).

package gate

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/events"
	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/introspection"
	"github.com/supervaize/supervaizer-sidecar/limits"
	"github.com/supervaize/supervaizer-sidecar/references"
)

// Deps are what only the host has.
type Deps struct {
	// Log is the gate's logger.
	Log *zap.Logger
	// Registry receives the gate's metrics (nil: none).
	Registry *prometheus.Registry
	// Placeholders and ProxyErrors are the host's adapters (Gate's fields).
	Placeholders func(r *http.Request, lookup func(key string) (any, bool))
	ProxyErrors  ProxyErrors
	// Shared hands out the state shared across reloads.
	Shared Shared
	// Prior are the problems the host found before (the settings'
	// placeholders): New still checks every setting, but starts no
	// background work.
	Prior []error
}

// Shared hands out the state a gate shares with the other gates of the
// process, by identity, across reloads; each call's release gives its
// reference back (Close runs it).
type Shared interface {
	// RequestMemory is the request_id → workspace memory of a server id.
	RequestMemory(serverID string) (m *events.Memory, release func())
	// IdempotencyStore is the store of ic's settings (its bounds applied).
	IdempotencyStore(ic *config.IdempotencyConfig, serverID string) (s idempotency.Store, release func(), err error)
	// LimitsState is the rate state of lc's store.
	LimitsState(lc *limits.Config, serverID string) (s *limits.State, release func(), err error)
	// ReferencesStore is the store of the references in effect (its
	// bounds applied).
	ReferencesStore(e config.EffectiveReferences, lim references.Limits, serverID string) (s references.Store, release func(), err error)
}

// New builds the gate of cfg, its placeholders expanded: the static checks
// (config.Config.Validate), the environment fallbacks and the mode
// (config.Config.Resolve), the plain settings (configure), the verifier,
// the start-up checks, the sources and the stores. It checks every setting
// it can and returns every problem joined, each naming its setting, and
// the effective settings either way; with any problem the gate is closed
// and nil, and no background work was started.
func New(cfg *config.Config, deps Deps) (*Gate, []config.Setting, error) {
	log := deps.Log
	g := &Gate{log: log, agents: grants.Agents{}, placeholders: deps.Placeholders, proxyErrors: deps.ProxyErrors}
	g.metrics = NewMetrics(deps.Registry, JWKSAge(&g.verifier))
	errs := slices.Clone(deps.Prior)
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	r, resolveErrs := cfg.Resolve(log)
	errs = append(errs, resolveErrs...)
	g.configure(cfg, r)
	var release func()
	g.requests, release = deps.Shared.RequestMemory(g.serverID)
	g.releases = append(g.releases, release)
	if r.Mode == config.ModeToken {
		errs = append(errs, g.buildVerifier(cfg.AuthBlock(), r.Auth, len(errs) == 0)...)
	}
	errs = append(errs, cfg.StartupChecks(r, log)...)
	g.settings = cfg.Settings(r)
	errs = append(errs, g.buildSources(cfg, len(errs) == 0)...)
	errs = append(errs, g.buildStores(cfg, deps.Shared)...)
	if len(errs) > 0 {
		g.Close()
		return nil, g.settings, errors.Join(errs...)
	}
	budget := cfg.EffectiveBodyMemory()
	if capacity, differs := BodyMemory.Join(g, budget); differs {
		log.Warn("body_memory differs between the loaded supervaizer_auth handlers: the process holds one budget, the largest",
			zap.Int64("body_memory", budget), zap.Int64("in_force", capacity))
	}
	fps := make([]string, len(g.keys))
	for i, k := range g.keys {
		fps[i] = k.FP
	}
	log.Info("supervaizer_auth provisioned", zap.String("mode", g.modeName()), zap.String("server_id", g.serverID),
		zap.Strings("api_key_fingerprints", fps), zap.Int("agents", len(g.agents)))
	return g, g.settings, nil
}

// buildVerifier checks the token mode settings ra resolved and, when they
// hold and clean (no earlier step found a problem), builds the verifier.
// Problems: no issuer; no key source, or both public_key and jwks_url;
// jwks_max_stale without jwks_url or not longer than jwks_refresh
// (grants.JWKSOptions.Validate); a public key that does not load; what
// grants.NewVerifier refuses.
func (g *Gate) buildVerifier(wa *config.WorkspaceAuth, ra *config.ResolvedAuth, clean bool) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
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
		Issuer: ra.Issuer, Audience: ra.Audience, ServerID: g.serverID,
		Leeway: &ra.Leeway, CacheSize: wa.CacheSize, Observe: g.metrics.ObserveVerify,
		MaxTokenLifetime: wa.MaxTokenLifetime.D(),
	}
	jwks := g.jwksOptions(wa, ra.JWKSURL)
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
		g.verifier = v
	}
	return errs
}

// jwksOptions are the JWKS source options of wa for url. Each fetch is
// counted (Metrics.JWKSFetch, with the failure's reason) and a failure is
// logged at warn: the last good keys are kept, whatever the document said.
func (g *Gate) jwksOptions(wa *config.WorkspaceAuth, url string) *grants.JWKSOptions {
	m, log := g.metrics, g.log
	return &grants.JWKSOptions{
		URL: url, RefreshInterval: wa.JWKSRefresh.D(), UnknownKIDInterval: wa.JWKSUnknownKIDInterval.D(),
		HTTPTimeout: wa.JWKSTimeout.D(), MaxStale: wa.JWKSMaxStale.D(),
		OnRefresh: func(err error) {
			m.JWKSFetch(err)
			if err != nil {
				log.Warn("JWKS fetch failed; keeping the last good keys", zap.String("jwks_url", redact.URL(url)),
					zap.String("reason", grants.JWKSFetchErrorReason(err)), zap.String("error", redact.URLsIn(err.Error())))
			}
		},
	}
}

// buildSources builds the gate's outside sources of truth: introspection,
// then the contract source (registration). The contract source starts
// background work, so it is built only when clean (no earlier problem);
// otherwise its settings are only checked.
func (g *Gate) buildSources(cfg *config.Config, clean bool) []error {
	var errs []error
	if err := g.buildIntrospection(cfg.AuthBlock().Introspection); err != nil {
		errs = append(errs, err)
	}
	if clean && len(errs) == 0 {
		if err := g.startContracts(cfg, g.log); err != nil { // contracts.go
			errs = append(errs, err)
		}
	} else if _, _, err := cfg.RegistrationKind(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// buildIntrospection builds the Introspector of workspace_auth's
// introspection block (nil: none). Errors: introspection outside token
// mode (required on), no url, both bearer and client_id, client_id without
// client_secret, an empty or malformed pattern.
func (g *Gate) buildIntrospection(ic *config.IntrospectionConfig) error {
	if ic == nil {
		return nil
	}
	if g.mode != ModeToken {
		return errors.New("supervaizer_auth: workspace_auth introspection needs workspace_auth required on")
	}
	switch {
	case ic.URL == "":
		return errors.New("supervaizer_auth: workspace_auth introspection: url is required")
	case ic.Bearer != "" && ic.ClientID != "":
		return errors.New("supervaizer_auth: workspace_auth introspection: bearer and client_id are both set: choose one")
	case ic.ClientID != "" && ic.ClientSecret == "":
		return errors.New("supervaizer_auth: workspace_auth introspection: client_id without client_secret")
	}
	client, err := introspection.New(introspection.Config{
		URL: ic.URL, ClientID: ic.ClientID, ClientSecret: ic.ClientSecret, Bearer: ic.Bearer,
		Timeout: ic.Timeout.D(), CacheTTL: ic.CacheTTL.D(), NegativeCacheTTL: ic.NegativeCacheTTL.D(),
		CacheSize: ic.CacheSize, Actions: ic.Actions, Observe: g.metrics.IntrospectionCall,
	})
	if err != nil {
		return fmt.Errorf("supervaizer_auth: workspace_auth %w", err)
	}
	g.intro = NewIntrospector(client)
	return nil
}

// buildStores builds the gate's shared state, over shared's: the
// idempotency guard, the limiter, the references step and, with
// events_fanout, the events hub.
func (g *Gate) buildStores(cfg *config.Config, shared Shared) []error {
	var errs []error
	for _, build := range []func(*config.Config, Shared) error{g.buildIdempotency, g.buildLimits, g.buildReferences} {
		if err := build(cfg, shared); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.EventsFanout {
		if base, err := cfg.UpstreamURL("events_fanout"); err != nil {
			errs = append(errs, err)
		} else {
			g.events = events.NewHub(base, g.requests, g.log.Named("events"), g.metrics.Fanout)
			if g.refs != nil && g.refs.LearnEvents {
				g.events.SetLearner(g.learnEvent) // references.go
			}
		}
	}
	return errs
}

// buildIdempotency builds the guard over the shared store of the
// idempotency block (the memory store without one; none when off).
// Errors: a store that cannot be opened (a bad Redis URL or mode, a file
// store that cannot be opened). The bounds and invariants are Validate's.
func (g *Gate) buildIdempotency(cfg *config.Config, shared Shared) error {
	ic := cmp.Or(cfg.Idempotency, &config.IdempotencyConfig{})
	if ic.Store == "off" {
		return nil
	}
	st, release, err := shared.IdempotencyStore(ic, g.serverID)
	if err != nil {
		return err
	}
	g.idemStore = st
	g.releases = append(g.releases, release) // closed when no gate holds it and its forwards have ended
	g.idem = idempotency.New(st, idempotency.Options{
		TTL: ic.TTL.D(), LockTTL: ic.LockTTL.D(), WaitTimeout: ic.WaitTimeout.D(), UpstreamTimeout: ic.UpstreamTimeout.D(),
		Observer: g.observeIdempotency(g.metrics.IdempotencyObserver(g.log)),
	})
	g.maxRecordBytes = cmp.Or(ic.MaxRecordBytes, config.DefaultMaxRecordBytes)
	g.idemActions = map[string]bool{"job.start": true}
	for _, a := range ic.Actions {
		g.idemActions[a] = true
	}
	g.requireIdemKey = ic.RequireKey
	return nil
}

// buildLimits builds the Limiter of the limits block (none without one)
// over the shared State of its store. Validate has run (a bad rule is its
// to report).
func (g *Gate) buildLimits(cfg *config.Config, shared Shared) error {
	lc := cfg.Limits.Domain()
	if lc == nil {
		return nil
	}
	rules, errs := lc.Rules()
	if len(errs) > 0 {
		return nil // reported by Validate
	}
	st, release, err := shared.LimitsState(lc, g.serverID)
	if err != nil {
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	l, err := limits.NewLimiter(st, rules, lc.OnStoreError, g.metrics.LimitsObserver(g.log))
	if err != nil {
		release()
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	g.limits = &LimitGate{Limiter: l, OnStoreError: lc.EffectiveOnStoreError()}
	g.releases = append(g.releases, release) // its State closes when no gate holds it
	return nil
}

// buildReferences builds the references step over the shared store of the
// references block (none without one, or off). Validate has run.
func (g *Gate) buildReferences(cfg *config.Config, shared Shared) error {
	rc := cfg.References
	if rc == nil {
		return nil
	}
	eff := cfg.EffectiveReferences()
	if eff.Store == "off" {
		return nil
	}
	lim := references.Limits{TTL: rc.TTL.D(), MaxEntries: rc.MaxEntries, MaxPerWorkspace: rc.MaxPerWorkspace}
	st, release, err := shared.ReferencesStore(eff, lim, g.serverID)
	if err != nil {
		return err
	}
	fields := map[string]bool{}
	for _, f := range eff.Fields {
		fields[f] = true
	}
	g.refs = &RefGate{Store: st, StoreName: eff.Store, Fields: fields, DataItems: eff.DataItems,
		LearnEvents: eff.LearnFromEvents, BindUnknown: eff.Unknown == "bind"}
	g.releases = append(g.releases, release)
	g.log.Debug("references on", zap.String("store", eff.Store), zap.Strings("fields", eff.Fields))
	return nil
}
