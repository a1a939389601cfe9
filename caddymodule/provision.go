package caddymodule

import (
	"errors"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/gate"
)

// EnvWorkspaceAuthIssuer is the environment variable of the expected token
// issuer, read when workspace_auth issuer is unset (`supervaizer mint`
// signs with it by default).
var EnvWorkspaceAuthIssuer = config.Env("workspace_auth issuer")

// Provision builds the handler's gate.Gate (build: gate.New over the
// settings, Caddy's adapters and usage pools; every problem joined, each
// naming its setting; nothing is kept when one fails), with its metrics in
// Caddy's registry, then logs the start-up warnings about the Caddy
// config (an open admin endpoint, config autosave: startup.go) and about
// logs that would write the credentials (logcheck.go). Caddy calls Validate
// after Provision; build runs the same checks first, so that one start-up
// lists every problem at once.
func (h *Handler) Provision(ctx caddy.Context) error {
	log := ctx.Logger()
	g, err := h.build(log, ctx.GetMetricsRegistry(), pools{})
	if err != nil {
		return err
	}
	h.g = g
	warnCaddyConfig(ctx, log)    // admin endpoint, config autosave (startup.go)
	warnUnfilteredLogs(ctx, log) // logs that would write the credentials (logcheck.go)
	return nil
}

// CheckProvision builds the handler exactly as Provision does (the same
// steps and rules, every problem joined), logging through log, then stops
// what it built (background JWKS and card refreshes included) and returns
// the effective settings (secrets as fingerprints, URLs redacted) with the
// problems, and the problems only check reports (CheckOnlyProblems: a
// placeholder agent id, an idempotency store that does not answer). A file
// store is checked, not opened (checkPools).
// `supervaizer check` (caddymodule/cli) calls it.
func (h *Handler) CheckProvision(log *zap.Logger) ([]config.Setting, error) {
	g, err := h.build(log, nil, checkPools{}) // a file store is not opened (checkpools.go)
	if g != nil {
		err = errors.Join(append([]error{err}, g.CheckOnlyProblems()...)...) // gate/checkonly.go
		g.Close()
	}
	return h.effective, err
}

// build builds the gate (gate.New) from h's settings, their placeholders
// expanded first (placeholdersettings.go), over Caddy's adapters and the
// shared state (pools; checkPools for check), logging through log and registering metrics in reg (nil:
// none). It keeps the effective settings for CheckProvision; with any
// problem, every one joined, the gate is nil.
func (h *Handler) build(log *zap.Logger, reg *prometheus.Registry, shared gate.Shared) (*gate.Gate, error) {
	prior := h.expandPlaceholders()
	g, settings, err := gate.New(&h.Config, gate.Deps{Log: log, Registry: reg,
		Placeholders: exposePlaceholders, ProxyErrors: proxyErrors{}, // handler.go
		Shared: shared, Prior: prior})
	h.effective = settings
	return g, err
}

// pools is gate.Shared over Caddy's usage pools: the state shared across
// reloads (requestmemory.go, idemstore.go, limits.go, references.go).
type pools struct{}

// Validate makes the static checks, those that need neither I/O nor the
// environment, each naming its setting: config.Config.Validate (every
// bound, word and invariant, written once) on the settings as written. A
// Caddyfile reaches them through the JSON it adapts to, so both front
// doors are held to the same rules. build (Provision) runs them too, so
// that one start-up lists every problem at once.
func (h *Handler) Validate() error { return h.Config.Validate() }

// Cleanup stops the gate's background work and gives back its shared state
// (see gate.close).
func (h *Handler) Cleanup() error {
	if h.g != nil {
		h.g.Close()
	}
	return nil
}
