package caddymodule

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/hashicorp/golang-lru/v2/expirable"
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
// each request_id belongs to (bounded LRU with TTL). A request_id seen for
// two workspaces is marked conflicted and its effects go to no filtered
// stream.
type requestMemory struct {
	mu    sync.Mutex
	cache *expirable.LRU[string, string]
}

func newRequestMemory() *requestMemory {
	return &requestMemory{cache: expirable.NewLRU[string, string](requestMemorySize, nil, requestMemoryTTL)}
}

func (m *requestMemory) remember(requestID, workspaceID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.cache.Get(requestID); ok && prev != workspaceID {
		workspaceID = conflictWorkspace
	}
	m.cache.Add(requestID, workspaceID)
}

func (m *requestMemory) workspace(requestID string) (string, bool) {
	return m.cache.Get(requestID)
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
// token valid for this server (no action scope needed), only that
// workspace's effects (by request_id of calls the gate allowed) plus
// connected and heartbeat events reach the client. Without a token the
// stream passes unfiltered, unless events_require_workspace_token is on (403).
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, a *audit) error {
	g := h.g
	values := r.Header.Values(headerWorkspaceAuth)
	if len(values) == 0 {
		if g.eventsRequireToken {
			a.deny(grants.CodeMissing)
			return writeDetail(w, http.StatusForbidden, grants.Message(grants.CodeMissing))
		}
		a.allow("unfiltered")
		return h.streamEvents(w, r, next, "", time.Time{})
	}
	if g.verifier == nil {
		a.deny(grants.CodeNotConfigured)
		return writeDetail(w, http.StatusForbidden, grants.Message(grants.CodeNotConfigured))
	}
	claims, err := g.verifier.Verify(r.Context(), grants.TokenFromHeader(values))
	if err != nil {
		d := deny(err)
		a.decision(d)
		return writeDetail(w, http.StatusForbidden, d.msg)
	}
	a.workspaceID, a.grantID, a.jti = claims.WorkspaceID, claims.GrantID, claims.JTI
	a.allow("filtered")
	return h.streamEvents(w, r, next, claims.WorkspaceID, g.verifier.ValidUntil(claims))
}

// streamEvents streams the agent's events to an allowed client: unfiltered
// when workspace is "", else filtered for that verified workspace until
// until (the token's exp + leeway), when the stream is closed. With
// events_fanout on, an HTTP/1.x GET of exactly /a2a/events (no query: the
// shared stream is the agent's plain one) joins the shared upstream stream
// (eventsHub); otherwise (HEAD, HTTP/2, /a2a/events/ or a query), or when
// the connection cannot be taken over, the request is proxied by next,
// through an sseFilter when filtered.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, workspace string, until time.Time) error {
	g := h.g
	if g.events != nil && r.ProtoMajor == 1 && r.Method == http.MethodGet &&
		r.URL.Path == "/a2a/events" && r.URL.RawQuery == "" {
		key := r.Header.Get(headerAPIKey)
		s, fail := g.events.join(r.Context(), key)
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
	return g.pass(next, &sseFilter{w: w, workspace: workspace, memory: g.requests}, r.WithContext(ctx))
}

// sseFilter forwards only the SSE events a workspace may see: comments,
// supervaizer.connected, supervaizer.heartbeat, and supervaizer.effect
// events whose data.request_id was allowed for the workspace (see
// eventAudience). Events are forwarded whole, as soon as their terminating
// blank line arrives.
//
// It deliberately implements no io.ReaderFrom: every byte goes through Write.
type sseFilter struct {
	w           http.ResponseWriter
	workspace   string
	memory      *requestMemory
	passthrough bool // not an SSE stream: no filtering
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
	if !f.headerDone {
		f.headerDone = true
		f.passthrough = !isEventStream(status, f.Header())
		if !f.passthrough {
			f.Header().Del("Content-Length")
		}
	}
	f.w.WriteHeader(status)
}

func (f *sseFilter) Write(p []byte) (int, error) {
	if !f.headerDone {
		f.WriteHeader(http.StatusOK)
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
// text/event-stream Content-Type.
func isEventStream(status int, h http.Header) bool {
	return status == http.StatusOK && strings.HasPrefix(strings.ToLower(h.Get("Content-Type")), "text/event-stream")
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
