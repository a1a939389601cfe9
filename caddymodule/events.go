package caddymodule

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/tidwall/gjson"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// Bounds of the request_id → workspace memory used by the SSE filter.
const (
	requestMemorySize = 100_000          // entries
	requestMemoryTTL  = 2 * time.Hour    // an effect later than this is not delivered filtered
	maxSSEEvent       = 1 << 20          // bytes of one event; a larger one is dropped
	conflictWorkspace = "\x00conflicted" // a request_id seen for two workspaces: delivered to nobody
)

// requestMemory remembers, for allowed /a2a calls, which verified workspace
// each request_id belongs to (bounded LRU; an entry older than
// requestMemoryTTL reads as absent). A request_id seen for two workspaces
// is marked conflicted and its effects go to no filtered stream. It runs no
// goroutine: expiry is checked on read. One memory per server id is shared
// by the gates of successive configs (requestMemories), so a reload does
// not make filtered streams lose the effects of calls made before it.
type requestMemory struct {
	mu    sync.Mutex
	cache *lru.Cache[string, rememberedRequest]
}

// rememberedRequest is the workspace of one request_id and when it expires.
type rememberedRequest struct {
	workspace string
	expires   time.Time
}

// requestMemories shares one requestMemory per server id across reloads.
var requestMemories = caddy.NewUsagePool()

func newRequestMemory() *requestMemory {
	c, _ := lru.New[string, rememberedRequest](requestMemorySize) // errors only for a size <= 0
	return &requestMemory{cache: c}
}

// acquireRequestMemory returns the request memory of serverID, shared with
// every gate holding it; pair it with releaseRequestMemory.
func acquireRequestMemory(serverID string) *requestMemory {
	v, _, _ := requestMemories.LoadOrNew(serverID, func() (caddy.Destructor, error) {
		return newRequestMemory(), nil
	})
	return v.(*requestMemory)
}

// releaseRequestMemory gives back one gate's reference.
func releaseRequestMemory(serverID string) { _, _ = requestMemories.Delete(serverID) }

// Destruct implements caddy.Destructor: nothing to stop.
func (m *requestMemory) Destruct() error { return nil }

func (m *requestMemory) remember(requestID, workspaceID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if prev, ok := m.cache.Get(requestID); ok && now.Before(prev.expires) && prev.workspace != workspaceID {
		workspaceID = conflictWorkspace
	}
	m.cache.Add(requestID, rememberedRequest{workspace: workspaceID, expires: now.Add(requestMemoryTTL)})
}

func (m *requestMemory) workspace(requestID string) (string, bool) {
	r, ok := m.cache.Get(requestID)
	if !ok || !time.Now().Before(r.expires) {
		return "", false
	}
	return r.workspace, true
}

// rememberForEvents records, for a token-verified call about to reach the
// agent, which workspace its request_id belongs to (replays and refusals
// never reach the agent, so they are not remembered).
func (g *gate) rememberForEvents(d decision, call *jsonrpc.Call) {
	if d.mode == verifiedToken {
		g.requests.remember(call.RequestID, d.claims.WorkspaceID)
	}
}

// serveEvents gates GET /a2a/events (the read key was checked by the
// caller). Beyond the SDK, which broadcasts every effect: with a workspace
// token valid for this server (no action scope needed) and naming an agent
// served here, only that workspace's effects (by request_id of calls the
// gate allowed) plus connected and heartbeat events reach the client. A
// token that does not verify, or names an agent not served here
// (workspace_authorization_unknown_agent, as on /a2a), is 403
// {"detail": <message>}. Without a token the stream passes unfiltered,
// unless events_require_workspace_token is on (403).
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, a *audit) error {
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

// sseFramer cuts a byte stream into whole SSE events (see eventEnd). An
// event larger than maxSSEEvent bytes is never emitted: its bytes go, in
// order and in pieces, to the feed's oversized callback (when not nil), as
// they arrive, up to and including the blank line that ends it. The framer
// holds at most maxSSEEvent bytes plus one feed.
type sseFramer struct {
	pending  []byte
	skipping bool // inside an oversized event: pending is a marker byte and its last bytes
}

// feed appends p and calls emit with every event it completes, in order
// (event is only valid during the call), and oversized (if not nil) with
// every piece of an oversized event, the last piece flagged with end. It
// stops at the first error of either and returns it.
func (f *sseFramer) feed(p []byte, emit func(event []byte) error, oversized func(piece []byte, end bool) error) error {
	if f.skipping {
		// p continues an oversized event. pending holds a marker byte, so
		// its kept tail is never read as the start of a line, and the last
		// bytes before p, so a blank line split across feeds is seen.
		kept := len(f.pending)
		buf := append(f.pending, p...)
		end := eventEnd(buf)
		if end < 0 {
			if oversized != nil {
				if err := oversized(p, false); err != nil {
					return err
				}
			}
			f.pending = skipTail(buf)
			return nil
		}
		n := max(end-kept, 0) // bytes of p up to the end of the event
		f.skipping, f.pending = false, nil
		if oversized != nil {
			if err := oversized(p[:n], true); err != nil {
				return err
			}
		}
		p = p[n:]
	}
	f.pending = append(f.pending, p...)
	for {
		end := eventEnd(f.pending)
		if end < 0 {
			break
		}
		if err := emit(f.pending[:end]); err != nil {
			return err
		}
		f.pending = f.pending[end:]
	}
	if len(f.pending) > maxSSEEvent {
		// Too large to hold: never emitted whole, only passed on in pieces.
		if oversized != nil {
			if err := oversized(f.pending, false); err != nil {
				return err
			}
		}
		f.skipping = true
		f.pending = skipTail(f.pending)
	}
	if len(f.pending) == 0 {
		f.pending = nil
	}
	return nil
}

// skipTail is what the framer keeps of an oversized event: a marker byte
// and its last three bytes (enough to see a blank line, CRLF CRLF, that a
// feed boundary splits).
func skipTail(b []byte) []byte {
	if len(b) > 3 {
		b = b[len(b)-3:]
	}
	return append([]byte{'x'}, b...)
}

// lineEnd finds the end of the line starting at i, with the SSE rule that a
// line ends at CRLF, LF or CR. It returns the index of the terminator and
// its length, or -1 when no terminator is in b yet. A CR at the very end of
// b counts as a one-byte terminator (a following LF then reads as an empty
// line, which only ends an already-ended event).
func lineEnd(b []byte, i int) (int, int) {
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '\n':
			return j, 1
		case '\r':
			if j+1 < len(b) && b[j+1] == '\n' {
				return j, 2
			}
			return j, 1
		}
	}
	return -1, 0
}

// eventEnd returns the index just after the blank line that ends the first
// event in b (SSE framing: lines end at CRLF, LF or CR; an empty line ends
// the event), or -1 when the event is not complete yet. A non-empty line
// ending with a CR at the end of b is not complete: an LF may follow.
func eventEnd(b []byte) int {
	for i := 0; i < len(b); {
		j, n := lineEnd(b, i)
		if j < 0 {
			return -1
		}
		if j == i {
			return j + n
		}
		if b[j] == '\r' && n == 1 && j+1 == len(b) {
			return -1
		}
		i = j + n
	}
	return -1
}

// sseLines splits a complete event into its lines (CRLF, LF or CR).
func sseLines(event []byte) [][]byte {
	var lines [][]byte
	for i := 0; i < len(event); {
		j, n := lineEnd(event, i)
		if j < 0 {
			lines = append(lines, event[i:])
			break
		}
		lines = append(lines, event[i:j])
		i = j + n
	}
	return lines
}

// eventAudience reads one complete event once: its name (the last "event"
// field, "" when none), and who may see it: all is true for
// supervaizer.connected, supervaizer.heartbeat and comment-only events
// (every stream); otherwise workspace is the verified workspace whose call
// produced a supervaizer.effect (its data one JSON object without duplicate
// keys, data.request_id a string the gate remembered for exactly one
// workspace), or "" when no workspace-filtered stream may see it.
// Unfiltered streams see every event.
func eventAudience(event []byte, memory *requestMemory) (name string, all bool, workspace string) {
	var data []byte
	onlyComments := true
	for _, line := range sseLines(event) {
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		onlyComments = false
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
	switch name {
	case "supervaizer.connected", "supervaizer.heartbeat":
		return name, true, ""
	case "supervaizer.effect":
		if !jsonrpc.IsJSONObject(data) { // no duplicate request_id a browser would read differently
			return name, false, ""
		}
		reqID := gjson.GetBytes(data, "request_id")
		if reqID.Type != gjson.String {
			return name, false, ""
		}
		if ws, ok := memory.workspace(reqID.Str); ok && ws != conflictWorkspace {
			return name, false, ws
		}
		return name, false, ""
	}
	return name, onlyComments, ""
}
