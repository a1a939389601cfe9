// The DataResource REST gate: header checks, the workspace decision, the
// hand-off to the agent.

package gate

import (
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/references"
)

// Request headers read on DataResource routes.
const (
	headerWorkspaceID     = "X-Supervaize-Workspace-Id"
	headerWorkspaceSlug   = "X-Supervaize-Workspace-Slug"
	headerMissionID       = "X-Supervaize-Mission-Id"
	headerMissionMetadata = "X-Supervaize-Mission-Metadata"
)

// serveData gates the DataResource REST routes.
func (g *Gate) serveData(w http.ResponseWriter, r *http.Request, next Next, rt route, a *audit) error {
	a.agentSlug, a.target = rt.agentSlug, "resource."+rt.resource+"."+rt.operation
	for _, name := range []string{headerWorkspaceID, headerWorkspaceSlug, headerMissionID, headerMissionMetadata} {
		if len(r.Header.Values(name)) > 1 {
			a.deny("ambiguous_header")
			return writeDetail(w, http.StatusBadRequest, "Duplicate "+name+" header")
		}
	}
	a.workspaceID = r.Header.Get(headerWorkspaceID)
	d := g.decideData(r.Context(), rt, r.Header)
	a.recordDecision(d)
	if !d.allowed() {
		return refuseREST(w, a, d.refused())
	}
	if msg := checkMissionMetadata(r.Header); msg != "" {
		a.deny("mission_metadata")
		return writeDetail(w, http.StatusBadRequest, msg)
	}
	// As admitForward (forward.go): the limits first (a call they refuse
	// binds nothing), then the item's reference, then the verified context
	// (only a forwarded request carries it).
	lc := newLimitCall(rt.agentSlug, d, a.x.keyFP, a.target)
	rf, release := g.admitLimits(r.Context(), a, lc)
	if rf != nil {
		return refuseREST(w, a, rf)
	}
	defer release()
	ws := d.ws
	learnItems := g.refs != nil && g.refs.DataItems && ws != ""
	if learnItems && rt.item != "" { // references.go
		if rf := g.resolveRefs(r.Context(), rt.agentSlug, ws, []references.Ref{dataRef(rt.resource, rt.item)}, a); rf != nil {
			return refuseREST(w, a, rf)
		}
	}
	g.injectVerified(r.Header, d)
	if !learnItems || rt.operation != "create" {
		return g.pass(next, w, r)
	}
	// A create's answer names the new item: bound to the caller before the
	// answer reaches it (references.go).
	r.Header.Del("Accept-Encoding")
	lw := &learnWriter{w: w}
	if err := g.pass(next, lw, r); err != nil {
		return err // a held answer cut short is not written: the proxy's error answers
	}
	if body := lw.complete(); body != nil {
		g.learn(r.Context(), rt.agentSlug, ws, createdItemRef(rt.resource, body))
	}
	return lw.finish()
}
