// Serve: the dispatch of one request through the gate, in the order of
// docs/architecture.md ("Request order", whose step numbers the comments
// below carry); every rule it applies lives in the file of its concept.

package gate

import (
	"net/http"
	"time"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// Next is the handler after the gate (Caddy's reverse_proxy, through
// Next, which has this method): it gets the allowed requests.
type Next interface {
	ServeHTTP(http.ResponseWriter, *http.Request) error
}

// Serve gates one request: route class, then the class's row of the
// route table (routePolicies: body bound, door, transport key, handler: the
// envelope and workspace authorization), before handing it to next
// (normally reverse_proxy). Denied requests never reach next. Incoming
// X-Supervaize-Verified-* headers are removed on every request.
func (g *Gate) Serve(w http.ResponseWriter, r *http.Request, next Next) error {
	start := time.Now()
	// A refusal bounds the wait for the body it did not read (body.go).
	unread := mayHaveUnreadBody(r)
	if unread && expectsContinue(r) {
		w = guardExpectContinue(w, r) // a refusal goes out before the body is asked for (body.go)
	}
	// 1. Tunnels and header hygiene.
	tunnel := requestHygiene(r)
	// 2. The sidecar's own endpoints.
	if class, ok := opsRoutes[r.URL.EscapedPath()]; ok && tunnel == "" {
		err := g.serveOps(w, r, class)
		if unread {
			g.boundUnreadBody(w) // none of them reads a body
		}
		return err // probes and status: not decisions, not logged
	}
	a := &audit{method: r.Method, route: "any", client: r.RemoteAddr}
	g.exposeDecision(r, a) // placeholders and span
	defer func() {
		g.logDecision(a, time.Since(start)) // 8. Audit line.
		if unread && a.outcome == "deny" {
			g.boundUnreadBody(w)
		}
	}()
	rf, err := g.serveSteps(w, r, next, tunnel, a)
	if rf != nil {
		return refuseREST(w, a, rf)
	}
	return err
}

// serveSteps are steps 3 to 7 of Serve, in order; a refusal (written by
// Serve) stops them before anything reaches the agent. tunnel is step 1's
// reason to refuse ("" for none).
func (g *Gate) serveSteps(w http.ResponseWriter, r *http.Request, next Next, tunnel string, a *audit) (*refusal.Refusal, error) {
	if tunnel != "" {
		return &refusal.Refusal{Status: http.StatusBadRequest, Message: "Protocol upgrades are not supported", Reason: tunnel}, nil
	}
	// 3. Route class.
	rt := classifyRoute(r.Method, r.URL.EscapedPath())
	a.route = rt.class.String()
	if _, served := g.agents[rt.agentSlug]; rt.agentSlug != "" && len(g.agents) > 0 && !served {
		// A DataResource route of an agent not served here: the SDK has
		// no such route, whatever the method, key or token (404).
		rt.status, rt.reason = http.StatusNotFound, "unknown_agent"
	}
	if rt.status != 0 {
		return &refusal.Refusal{Status: rt.status, Message: statusDetail(rt.status), Reason: rt.reason}, nil
	}
	// 4. Body bound.
	p := rt.policy()
	if rf := g.boundBody(w, r, p); rf != nil {
		return rf, nil
	}
	// 5. The class's door.
	switch g.admit(p.door) {
	case admitClosed:
		return routeDenied, nil
	case admitOpen:
		a.allow("public")
	default:
		// 6. Transport key.
		fp, rf := g.keys.Check(r.Header[headerAPIKey], p.key.scope(r.Method))
		if rf != nil {
			return rf, nil
		}
		a.x.keyFP = fp
		// 7. Per class: its handler, or the agent.
		if p.serve != nil {
			return nil, p.serve(g, w, r, next, rt, a)
		}
		a.allow("api_key")
	}
	return nil, g.pass(next, w, r)
}

// routeDenied refuses a route class whose door is closed (other_routes
// deny, the v1 routes not allowed): 404, as for a path the agent does
// not have. Shared: never changed.
var routeDenied = &refusal.Refusal{Status: http.StatusNotFound, Message: "Not Found", Reason: "route_denied"}
