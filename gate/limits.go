// The limits step: per-workspace rate and concurrency rules (limits/),
// checked after the workspace decision and, for covered confirms, only
// when the call is about to be forwarded (docs/limits.md, "Fair sharing of an
// agent: limits").

package gate

import (
	"context"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/limits"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// LimitGate is a gate's provisioned limits.
type LimitGate struct {
	// Limiter applies the rules over the shared state (limits/).
	Limiter *limits.Limiter
	// OnStoreError is local or deny, for the readiness note.
	OnStoreError string
}

// limitCall is what the limits need of an allowed call: its key, what the
// key was made of (for the audit line) and its target.
type limitCall struct {
	key          limits.Key
	kind, target string
}

// newLimitCall keys a call on the verified workspace, or for a call without
// one (bootstrap, local mode) on the transport key's fingerprint alone: the
// request's own workspace id is the client's to invent, so it never makes a
// key (docs/limits.md, "Fair sharing of an agent: limits", the key).
func newLimitCall(agent string, d decision, keyFP, target string) limitCall {
	if d.mode == verifiedToken && d.claims != nil && d.claims.WorkspaceID != "" {
		return limitCall{key: limits.Key{Agent: agent, Workspace: d.claims.WorkspaceID}, kind: "workspace", target: target}
	}
	return limitCall{key: limits.Key{Agent: agent, Transport: keyFP}, kind: "transport_key", target: target}
}

// limitTarget is an /a2a call's limits target: its action, or
// "surface:<id>" for a surface.load (surfaces and actions are distinct
// targets: a rule on job.start does not count loads of a job.start surface).
func limitTarget(call *jsonrpc.Call) string {
	if call.IsAction() {
		return call.Action
	}
	return limits.SurfacePrefix + call.Surface
}

// noRelease is the release of a call no concurrency rule holds.
func noRelease() {}

// admitLimits applies the limits to an allowed call about to be forwarded
// and records the outcome in a: nil, or the limit's refusal (limits/:
// -32029 on /a2a, 429 on REST routes, Retry-After). release (never nil)
// ends the call's concurrency slots.
func (g *Gate) admitLimits(ctx context.Context, a *audit, lc limitCall) (*refusal.Refusal, func()) {
	if g.limits == nil {
		return nil, noRelease
	}
	d, release := g.limits.Limiter.Admit(ctx, lc.key, lc.target)
	g.metrics.limitKeys(g.limits.Limiter.State().Keys())
	if !d.Matched {
		return d.Refusal, release
	}
	a.x.limitKey, a.x.limitRule = lc.kind, d.Rule
	switch {
	case !d.Allowed():
		a.x.limit = d.Code()
	case d.Fallback:
		a.x.limit = "allowed_local_fallback"
	default:
		a.x.limit = "allowed"
	}
	return d.Refusal, release
}

// limitsNotes are readiness notes: the shared store is failing (calls
// follow on_store_error meanwhile; readiness itself is unchanged).
func (g *Gate) limitsNotes(lastError bool) []string {
	if g.limits == nil {
		return nil
	}
	h := g.limits.Limiter.State().Health()
	if !h.Down {
		return nil
	}
	return []string{failingNote("limits store", h.Since, " (on_store_error "+g.limits.OnStoreError+")", h.LastError, lastError)}
}
