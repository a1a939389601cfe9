// The limits block's limiter Provision builds over a State shared across reloads (the
// request path's step is gate/limits.go; docs/limits.md, "Fair sharing of an
// agent: limits").

package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/limits"
)

// limitsPool holds the limit States by identity: a reload with the same
// store settings keeps every budget (Caddy provisions the new config
// before it cleans up the old one).
var limitsPool = caddy.NewUsagePool()

// provisionLimits builds the gate's Limiter of lc (nil: none) over the State of its store
// identity (shared across reloads). Validate has run.
func provisionLimits(g *gate.Gate, lc *limits.Config, log *zap.Logger) error {
	if lc == nil {
		return nil
	}
	rules, errs := lc.Rules()
	if len(errs) > 0 {
		return nil // reported by Validate
	}
	ro, identity := lc.Redis(g.ServerID)
	v, _, err := limitsPool.LoadOrNew(identity, func() (caddy.Destructor, error) {
		return limits.NewState(lc.MaxKeys, ro)
	})
	if err != nil {
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	st := v.(*limits.State)
	st.SetMaxKeys(lc.MaxKeys)
	l, err := limits.NewLimiter(st, rules, lc.OnStoreError, g.Metrics.LimitsObserver(log))
	if err != nil {
		_, _ = limitsPool.Delete(identity)
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	g.Limits = &gate.LimitGate{Limiter: l, OnStoreError: lc.EffectiveOnStoreError()}
	g.Releases = append(g.Releases, func() { _, _ = limitsPool.Delete(identity) }) // its State closes when no gate holds it
	return nil
}
