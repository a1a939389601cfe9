// The DataResource REST gate: header checks, the workspace decision, the
// hand-off to the agent.

package gate

import (
	"net/http"
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
	a.decision(d)
	if !d.allow {
		return writeDetail(w, http.StatusForbidden, d.msg)
	}
	if msg := checkMissionMetadata(r.Header); msg != "" {
		a.deny("mission_metadata")
		return writeDetail(w, http.StatusBadRequest, msg)
	}
	g.injectVerified(r.Header, d)
	ld, release := g.admitLimits(r.Context(), a, newLimitCall(rt.agentSlug, d, a.x.keyFP, a.target))
	if !ld.Allowed {
		return answerDataRateLimited(w, ld)
	}
	defer release()
	return g.pass(next, w, r)
}
