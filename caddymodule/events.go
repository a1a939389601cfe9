// The GET /a2a/events gate: the read key's stream, optionally filtered by a
// workspace token (sseFilter over the proxied stream, or the shared stream
// of the events hub, fanout.go).

package caddymodule

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

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
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, _ route, a *audit) error {
	g := h.g
	values := r.Header.Values(headerWorkspaceAuth)
	if len(values) == 0 {
		if g.eventsRequireToken {
			a.deny(grants.CodeMissing)
			return writeDetail(w, http.StatusForbidden, grants.Message(grants.CodeMissing))
		}
		a.allow("unfiltered")
		return h.streamEvents(w, r, next, a, "", time.Time{})
	}
	if g.verifier == nil {
		a.deny(grants.CodeNotConfigured)
		return writeDetail(w, http.StatusForbidden, grants.Message(grants.CodeNotConfigured))
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
		a.decision(d)
		return writeDetail(w, http.StatusForbidden, d.msg)
	}
	a.workspaceID, a.grantID, a.jti = claims.WorkspaceID, claims.GrantID, claims.JTI
	a.allow("filtered")
	return h.streamEvents(w, r, next, a, claims.WorkspaceID, g.verifier.ValidUntil(claims))
}

// streamEvents streams the agent's events to an allowed client: unfiltered
// when workspace is "", else filtered for that verified workspace until
// ValidUntil (the token's exp + leeway + 1 s, the first second it no longer
// verifies), when the stream is closed. With
// events_fanout on, an HTTP/1.x GET of exactly /a2a/events (no query: the
// shared stream is the agent's plain one) joins the shared upstream stream
// (eventsHub); otherwise (HEAD, HTTP/2, /a2a/events/ or a query), or when
// the connection cannot be taken over, the request is proxied by next,
// through an sseFilter when filtered.
//
// A filtered stream fails closed (issue 13): the client's Accept-Encoding is
// not passed on (the filter reads events, not compressed bytes), and an
// agent's 2xx answer that is not a readable event stream (see
// filterableStream) is 502 {"detail":"Bad Gateway"} to that client, none of
// its body relayed, and the audit line says deny, code
// event_stream_unfilterable.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, a *audit, workspace string, until time.Time) error {
	g := h.g
	if g.events != nil && r.ProtoMajor == 1 && r.Method == http.MethodGet &&
		r.URL.Path == "/a2a/events" && r.URL.RawQuery == "" {
		key := r.Header.Get(headerAPIKey)
		s, fail := g.events.join(r.Context(), key)
		if fail != nil && (fail.unfilterable || workspace != "" && fail.status/100 == 2) {
			a.deny(codeUnfilterable) // an encoded stream, or a 2xx not an event stream for a filtered client
			return writeDetail(w, http.StatusBadGateway, statusDetail(http.StatusBadGateway))
		}
		if fail != nil {
			if len(fail.body) == 0 {
				return writeDetail(w, fail.status, statusDetail(fail.status))
			}
			if fail.contentType != "" {
				w.Header().Set("Content-Type", fail.contentType)
			}
			w.WriteHeader(fail.status)
			_, err := w.Write(fail.body)
			return err
		}
		if g.events.serveFanout(w, s, key, workspace, until) {
			return nil
		}
		s.endIfIdle()
	}
	if workspace == "" {
		return g.pass(next, w, r)
	}
	ctx, cancel := context.WithDeadline(r.Context(), until)
	defer cancel()
	r.Header.Del("Accept-Encoding")
	f := &sseFilter{w: w, workspace: workspace, memory: g.requests, audit: a, before: w.Header().Clone()}
	defer func() {
		// Caddy's proxy aborts the handler (panic(http.ErrAbortHandler))
		// when a Write fails mid-body. A refused filter fails it on purpose,
		// its whole 502 already written: the request then ends normally, so
		// the 502 reaches the client (an abort resets an HTTP/2 or HTTP/3
		// stream). Any other panic goes on.
		if f.refused {
			if v := recover(); v != nil && v != http.ErrAbortHandler {
				panic(v)
			}
		}
	}()
	return g.pass(next, f, r.WithContext(ctx))
}

// codeUnfilterable is the audit code of a filtered stream refused because
// the agent's answer could not be filtered.
const codeUnfilterable = "event_stream_unfilterable"

// errUnfilterable stops the proxy's copy of an agent answer refused by an
// sseFilter (the client got a 502).
var errUnfilterable = errors.New("supervaizer_auth: the agent's answer is not an event stream the filter can read")

// sseFilter forwards only the SSE events a workspace may see: comments,
// supervaizer.connected, supervaizer.heartbeat, and supervaizer.effect
// events whose data.request_id was allowed for the workspace (see
// eventAudience). Events are forwarded whole, as soon as their terminating
// blank line arrives.
//
// The response head decides, once: a 1xx is not forwarded (it would decide
// nothing and could carry the agent's headers); a non-2xx final answer is
// the agent's refusal, relayed as it is; a 2xx other than a filterable
// stream is refused: 502, the head reset to before (the headers set before
// the proxy ran), nothing of the agent's body written (Write returns
// errUnfilterable, so the proxy stops reading it).
//
// It deliberately implements no io.ReaderFrom: every byte goes through Write.
type sseFilter struct {
	w           http.ResponseWriter
	workspace   string
	memory      *requestMemory
	audit       *audit      // the request's audit line (if not nil): deny when refused
	before      http.Header // w's headers before the proxy added the agent's
	passthrough bool        // the agent's non-2xx answer: relayed
	refused     bool        // a 2xx that cannot be filtered: 502 written, nothing relayed
	headerDone  bool
	framer      sseFramer
}

// Header returns the response headers.
func (f *sseFilter) Header() http.Header { return f.w.Header() }

// Flush sends what was forwarded so far (complete events only).
func (f *sseFilter) Flush() { _ = http.NewResponseController(f.w).Flush() }

// Unwrap lets http.ResponseController reach deadlines and flushing.
func (f *sseFilter) Unwrap() http.ResponseWriter { return f.w }

func (f *sseFilter) WriteHeader(status int) {
	if f.headerDone || status < 200 {
		return // a second head (nothing to change now), or an informational one (not forwarded)
	}
	f.headerDone = true
	switch {
	case status/100 != 2:
		f.passthrough = true
	case !filterableStream(status, f.Header()):
		f.refused = true
		if f.audit != nil {
			f.audit.deny(codeUnfilterable)
		}
		h := f.Header()
		clear(h)
		maps.Copy(h, f.before)
		_ = writeDetail(f.w, http.StatusBadGateway, statusDetail(http.StatusBadGateway))
		return
	default:
		f.Header().Del("Content-Length")
	}
	f.w.WriteHeader(status)
}

func (f *sseFilter) Write(p []byte) (int, error) {
	if !f.headerDone {
		f.WriteHeader(http.StatusOK)
	}
	if f.refused {
		return 0, errUnfilterable
	}
	if f.passthrough {
		return f.w.Write(p)
	}
	err := f.framer.feed(p, func(event []byte) error {
		if _, all, ws := eventAudience(event, f.memory); all || (ws != "" && ws == f.workspace) {
			_, err := f.w.Write(event)
			return err
		}
		return nil
	}, nil) // a filtered stream never gets an oversized event
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// isEventStream reports whether a response is an SSE stream: 200 with a
// text/event-stream Content-Type (parameters allowed, e.g. "; charset=utf-8").
func isEventStream(status int, h http.Header) bool {
	if status != http.StatusOK {
		return false
	}
	mt, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// filterableStream reports whether a response is an event stream the SSE
// filter can read event by event: an SSE stream (isEventStream) whose body
// is not encoded (no Content-Encoding, or identity; see identityEncoding):
// compressed bytes are no events, and filtering them would pass or drop
// them blindly.
func filterableStream(status int, h http.Header) bool {
	return isEventStream(status, h) && identityEncoding(h)
}
