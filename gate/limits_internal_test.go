package gate

import (
	"testing"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/limits"
)

// TestLimitKey: a verified workspace is the key; a call without one
// (bootstrap, local mode) is keyed on the transport key alone, never on
// the workspace the request names.
func TestLimitKey(t *testing.T) {
	verified := decision{mode: verifiedToken, claims: &grants.Claims{WorkspaceID: "ws-verified"}}
	lc := newLimitCall("agent", verified, "fp", "job.start")
	if lc.key.Workspace != "ws-verified" || lc.key.Transport != "" || lc.kind != "workspace" || !lc.key.Verified() {
		t.Errorf("verified: %+v", lc)
	}
	for _, mode := range []string{verifiedBootstrap, verifiedLocal} {
		lc := newLimitCall("agent", decision{mode: mode}, "fp", "job.start")
		if lc.key != (limits.Key{Agent: "agent", Transport: "fp"}) || lc.kind != "transport_key" {
			t.Errorf("%s: %+v", mode, lc)
		}
	}
}

// TestLimitTargetSeparatesSurfaces: a surface load's target is
// surface:<id>, which an action rule of the same id does not match.
func TestLimitTargetSeparatesSurfaces(t *testing.T) {
	action := &jsonrpc.Call{Method: jsonrpc.MethodActionInvoke, Surface: "job.start", Action: "job.start"}
	surface := &jsonrpc.Call{Method: jsonrpc.MethodSurfaceLoad, Surface: "job.start"}
	if got := limitTarget(action); got != "job.start" {
		t.Errorf("action target %q", got)
	}
	if got := limitTarget(surface); got != "surface:job.start" {
		t.Errorf("surface target %q", got)
	}
	onAction, _ := limits.NewRateRule([]string{"job.start"}, "1/m", 0)
	onSurface, _ := limits.NewRateRule([]string{"surface:job.start"}, "1/m", 0)
	if onAction.Patterns.Match(limitTarget(surface)) || !onSurface.Patterns.Match(limitTarget(surface)) ||
		onSurface.Patterns.Match(limitTarget(action)) {
		t.Error("action and surface targets share one space")
	}
}
