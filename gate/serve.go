// Serve: the dispatch of one request through the gate, in the order of
// docs/architecture.md ("Request order", whose step numbers the comments
// below carry); every rule it applies lives in the file of its concept.

package gate

import (
	"net/http"
	"time"
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
	// A refusal bounds the wait for the body it did not read (unreadbody.go).
	unread := mayHaveUnreadBody(r)
	if unread && expectsContinue(r) {
		w = guardExpectContinue(w, r) // a refusal goes out before the body is asked for (unreadbody.go)
	}
	// 1. Tunnels.
	if reason := tunnelRequest(r); reason != "" {
		a := &audit{method: r.Method, route: "any", client: r.RemoteAddr}
		a.deny(reason)
		g.logDecision(a, time.Since(start))
		if unread {
			g.boundUnreadBody(w)
		}
		return writeDetail(w, http.StatusBadRequest, "Protocol upgrades are not supported")
	}
	// 2. The sidecar's own endpoints.
	if ok, err := g.serveOps(w, r); ok {
		if unread {
			g.boundUnreadBody(w) // none of them reads a body
		}
		return err // probes and status: not decisions, not logged
	}
	a := &audit{method: r.Method, client: r.RemoteAddr}
	g.exposeDecision(r, a) // placeholders and span
	defer func() {
		g.logDecision(a, time.Since(start)) // 9. Audit line.
		if unread && a.outcome == "deny" {
			g.boundUnreadBody(w)
		}
	}()

	// 3. Header hygiene.
	cleanHeaders(r)

	// 4. Route class.
	rt := classifyRoute(r.Method, r.URL.EscapedPath())
	a.route = rt.class.String()
	if _, served := g.agents[rt.agentSlug]; rt.agentSlug != "" && len(g.agents) > 0 && !served {
		// A DataResource route of an agent not served here: the SDK has
		// no such route, whatever the method, key or token (404).
		rt.status, rt.reason = http.StatusNotFound, "unknown_agent"
	}
	if rt.status != 0 {
		a.deny(rt.reason)
		return writeDetail(w, rt.status, statusDetail(rt.status))
	}

	// 5. Body bound.
	p := rt.policy()
	if refused, err := g.boundBody(w, r, p, a); refused {
		return err
	}
	// 6. The class's door.
	switch g.admit(p.door) {
	case admitClosed:
		a.deny("route_denied")
		return writeDetail(w, http.StatusNotFound, "Not Found")
	case admitOpen:
		a.allow("public")
		return g.pass(next, w, r)
	}
	// 7. Transport key.
	status, detail, fp, reason := g.keys.Check(r.Header[headerAPIKey], p.key.scope(r.Method))
	if status != 0 {
		a.deny(reason)
		return writeDetail(w, status, detail)
	}
	a.x.keyFP = fp
	// 8. Per class: its handler, or the agent.
	if p.serve == nil {
		a.allow("api_key")
		return g.pass(next, w, r)
	}
	return p.serve(g, w, r, next, rt, a)
}

// pass hands an allowed request to next (the proxy to the agent), without
// the workspace token when forward_token is off (whatever the route).
// Request trailers are dropped: they arrive after the decision (a trailer
// could carry what the gate refused in a header) and no Supervaizer route
// uses them.
func (g *Gate) pass(next Next, w http.ResponseWriter, r *http.Request) error {
	g.dropForForward(r)
	if _, streamed := r.Body.(*timedBody); !streamed {
		return next.ServeHTTP(w, r)
	}
	fw := &bodyFailureWriter{ResponseWriter: w, r: r}
	err := next.ServeHTTP(fw, r)
	if err != nil && !fw.wrote {
		if status := bodyFailure(r); status != 0 {
			// The streamed body failed the proxy's forward: the answer a
			// declared length would have had, not the proxy's 502/504.
			return writeDetail(w, status, statusDetail(status))
		}
	}
	return err
}

// bodyFailureWriter is the writer of a forward whose body is streamed
// (timedBody): reverse_proxy writes 499 itself, and returns no error, when
// the request's context ended, which an HTTP/1 server does once the body's
// read deadline has passed; that 499 becomes the body's own answer
// (bodyFailure: 408 or 413).
type bodyFailureWriter struct {
	http.ResponseWriter
	r        *http.Request
	wrote    bool // a status went out
	replaced bool // the 499 was replaced: the rest is dropped
}

func (b *bodyFailureWriter) WriteHeader(code int) {
	switch {
	case b.replaced:
		return
	case code == statusClientClosed && !b.wrote:
		if status := bodyFailure(b.r); status != 0 {
			b.wrote, b.replaced = true, true
			_ = writeDetail(b.ResponseWriter, status, statusDetail(status))
			return
		}
	}
	if code >= 200 {
		b.wrote = true
	}
	b.ResponseWriter.WriteHeader(code)
}

func (b *bodyFailureWriter) Write(p []byte) (int, error) {
	if b.replaced {
		return len(p), nil
	}
	b.wrote = true
	return b.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController (flushes, deadlines) the writer.
func (b *bodyFailureWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// statusClientClosed is the 499 reverse_proxy records for a request whose
// context ended.
const statusClientClosed = 499

// dropForForward removes from r's own header map (the map Caddy's
// placeholders and handle_errors routes read too) what an allowed request
// does not carry on: the workspace token with forward_token off, trailers,
// the replay headers. pass applies it; a covered call applies it before it
// clones the request for the agent (serveIdempotent), so that the clone and
// the request the rest of Caddy sees agree.
func (g *Gate) dropForForward(r *http.Request) {
	if !g.forwardToken {
		delete(r.Header, headerWorkspaceAuth)
	}
	r.Trailer = nil
	delete(r.Header, headerTrailer)
	dropReplayHeaders(r)
}
