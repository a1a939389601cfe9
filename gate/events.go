// The GET /a2a/events gate: the read key's stream, optionally filtered by a
// workspace token (events.Filter over the proxied stream, or the shared stream
// of the events hub, events.Hub).

package gate

import (
	"context"
	"net/http"
	"time"

	"github.com/supervaize/supervaizer-sidecar/events"
	"github.com/supervaize/supervaizer-sidecar/grants"
)

// serveEvents gates GET /a2a/events (the read key was checked by the
// caller). Beyond the SDK, which broadcasts every effect: with a workspace
// token valid for this server (no action scope needed) and naming an agent
// served here, only that workspace's effects (by request_id of calls the
// gate allowed) plus connected and heartbeat events reach the client. A
// token that does not verify, or names an agent not served here
// (workspace_authorization_unknown_agent, as on /a2a), is 403
// {"detail": <message>}. Without a token the stream passes unfiltered,
// unless events_require_workspace_token is on (403).
func (g *Gate) serveEvents(w http.ResponseWriter, r *http.Request, next Next, _ route, a *audit) error {
	values := r.Header.Values(headerWorkspaceAuth)
	if len(values) == 0 {
		if g.eventsRequireToken {
			return refuseREST(w, a, grants.Refuse(grants.CodeMissing, ""))
		}
		a.allow("unfiltered")
		return g.streamEvents(w, r, next, a, "", time.Time{})
	}
	if g.verifier == nil {
		return refuseREST(w, a, grants.Refuse(grants.CodeNotConfigured, ""))
	}
	claims, err := g.verifier.Verify(r.Context(), grants.TokenFromHeader(values))
	if err == nil {
		a.agentSlug = claims.AgentSlug
		// The token's own agent must be one served here, with the Studio id
		// configured for it: the checks /a2a makes of the agent a call names
		// (grants.Authorize), here of the agent the token names, so the
		// answers (unknown_agent, agent_not_registered, wrong_agent) and
		// their messages are /a2a's. No workspace or scope to check.
		err = grants.Authorize(claims, g.agents, grants.Target{AgentSlug: claims.AgentSlug,
			WorkspaceID: claims.WorkspaceID, WorkspaceSlug: claims.WorkspaceSlug})
	}
	if err != nil {
		d := deny(err)
		d.claims = claims
		a.recordDecision(d)
		return refuseREST(w, a, d.refused())
	}
	a.workspaceID, a.grantID, a.jti = claims.WorkspaceID, claims.GrantID, claims.JTI
	a.allow("filtered")
	return g.streamEvents(w, r, next, a, claims.WorkspaceID, g.verifier.ValidUntil(claims))
}

// streamEvents streams the agent's events to an allowed client: unfiltered
// when workspace is "", else filtered for that verified workspace until
// ValidUntil (the token's exp + leeway + 1 s, the first second it no longer
// verifies), when the stream is closed. With
// events_fanout on, an HTTP/1.x GET of exactly /a2a/events (no query: the
// shared stream is the agent's plain one) joins the shared upstream stream
// (events.Hub); otherwise (HEAD, HTTP/2, /a2a/events/ or a query), or when
// the connection cannot be taken over, the request is proxied by next,
// through an events.Filter when filtered.
//
// A filtered stream fails closed (issue 13): the client's Accept-Encoding is
// not passed on (the filter reads events, not compressed bytes), and an
// agent's 2xx answer that is not a readable event stream (see
// events.Filterable) is 502 {"detail":"Bad Gateway"} to that client, none of
// its body relayed, and the audit line says deny, code
// event_stream_unfilterable.
func (g *Gate) streamEvents(w http.ResponseWriter, r *http.Request, next Next, a *audit, workspace string, until time.Time) error {
	if g.events != nil && r.ProtoMajor == 1 && r.Method == http.MethodGet &&
		r.URL.Path == "/a2a/events" && r.URL.RawQuery == "" {
		key := r.Header.Get(headerAPIKey)
		s, fail := g.events.Join(r.Context(), key)
		if fail != nil && (fail.Unfilterable || workspace != "" && fail.Status/100 == 2) {
			a.deny(codeUnfilterable) // an encoded stream, or a 2xx not an event stream for a filtered client
			return writeDetail(w, http.StatusBadGateway, statusDetail(http.StatusBadGateway))
		}
		if fail != nil {
			if len(fail.Body) == 0 {
				return writeDetail(w, fail.Status, statusDetail(fail.Status))
			}
			if fail.ContentType != "" {
				w.Header().Set("Content-Type", fail.ContentType)
			}
			w.WriteHeader(fail.Status)
			_, err := w.Write(fail.Body)
			return err
		}
		if g.events.Serve(w, s, key, workspace, until) {
			return nil
		}
		s.EndIfIdle()
	}
	if workspace == "" {
		return g.pass(next, &eventFlusher{ResponseWriter: w}, r)
	}
	ctx, cancel := context.WithDeadline(r.Context(), until)
	defer cancel()
	r.Header.Del("Accept-Encoding")
	f := events.NewFilter(w, workspace, g.requests, func(w http.ResponseWriter) {
		if a != nil {
			a.deny(codeUnfilterable)
		}
		_ = writeDetail(w, http.StatusBadGateway, statusDetail(http.StatusBadGateway))
	})
	if g.refs != nil && g.refs.LearnEvents {
		f.Learn(g.learnEvent) // references.go
	}
	defer func() {
		// Caddy's proxy aborts the handler (panic(http.ErrAbortHandler))
		// when a Write fails mid-body. A refused filter fails it on purpose,
		// its whole 502 already written: the request then ends normally, so
		// the 502 reaches the client (an abort resets an HTTP/2 or HTTP/3
		// stream). Any other panic goes on.
		if f.Refused() {
			if v := recover(); v != nil && v != http.ErrAbortHandler {
				panic(v)
			}
		}
	}()
	return g.pass(next, &eventFlusher{ResponseWriter: f}, r.WithContext(ctx))
}

// codeUnfilterable is the audit code of a filtered stream refused because
// the agent's answer could not be filtered.
const codeUnfilterable = "event_stream_unfilterable"
