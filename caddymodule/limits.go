// The limits block's rate State, shared across reloads (the limiter over it
// is gate.New's, gate/new.go; the request path's step is gate/limits.go;
// docs/limits.md, "Fair sharing of an agent: limits").

package caddymodule

import (
	"github.com/caddyserver/caddy/v2"

	"github.com/supervaize/supervaizer-sidecar/limits"
)

// limitsPool holds the limit States by identity: a reload with the same
// store settings keeps every budget (Caddy provisions the new config
// before it cleans up the old one).
var limitsPool = caddy.NewUsagePool()

// LimitsState is the rate state of lc's store identity (gate.Shared),
// shared across reloads, its bound of tracked keys applied.
func (pools) LimitsState(lc *limits.Config, serverID string) (*limits.State, func(), error) {
	ro, identity := lc.Redis(serverID)
	v, _, err := limitsPool.LoadOrNew(identity, func() (caddy.Destructor, error) {
		return limits.NewState(lc.MaxKeys, ro)
	})
	if err != nil {
		return nil, nil, err
	}
	st := v.(*limits.State)
	st.SetMaxKeys(lc.MaxKeys)
	return st, func() { _, _ = limitsPool.Delete(identity) }, nil
}
