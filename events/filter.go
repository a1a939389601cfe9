// The per-workspace SSE filter over a proxied event stream, and what makes
// an answer a stream it can read.

package events

import (
	"errors"
	"maps"
	"net/http"
	"strings"

	"github.com/supervaize/supervaizer-sidecar/internal/hop"
)

// ErrUnfilterable stops the proxy's copy of an agent answer refused by an
// Filter (the client got a 502).
var ErrUnfilterable = errors.New("supervaizer_auth: the agent's answer is not an event stream the filter can read")

// Filter forwards only the SSE events a workspace may see: comments,
// supervaizer.connected, supervaizer.heartbeat, and supervaizer.effect
// events whose data.request_id was allowed for the workspace (see
// Audience). Events are forwarded whole, as soon as their terminating
// blank line arrives.
//
// The response head decides, once: a 1xx is not forwarded (it would decide
// nothing and could carry the agent's headers); a non-2xx final answer is
// the agent's refusal, relayed as it is; a 2xx other than a filterable
// stream is refused: 502, the head reset to before (the headers set before
// the proxy ran), nothing of the agent's body written (Write returns
// ErrUnfilterable, so the proxy stops reading it).
//
// It deliberately implements no io.ReaderFrom: every byte goes through Write.
type Filter struct {
	w           http.ResponseWriter
	workspace   string
	memory      *Memory
	refuse      func(w http.ResponseWriter) // writes the 502 (and audits the refusal)
	before      http.Header                 // w's headers before the proxy added the agent's
	passthrough bool                        // the agent's non-2xx answer: relayed
	refused     bool                        // a 2xx that cannot be filtered: 502 written, nothing relayed
	headerDone  bool
	framer      Framer
	learn       EffectLearner // nil: nothing learned
}

// Learn has learn receive the effects of the filter's own workspace (each
// effect once per stream of that workspace).
func (f *Filter) Learn(learn EffectLearner) { f.learn = learn }

// NewFilter returns the filter of w for workspace, reading the request
// memory; refuse writes the 502 of an answer it cannot filter (the head
// already reset to w's headers of now, before the proxy adds the agent's).
func NewFilter(w http.ResponseWriter, workspace string, memory *Memory, refuse func(w http.ResponseWriter)) *Filter {
	return &Filter{w: w, workspace: workspace, memory: memory, refuse: refuse, before: w.Header().Clone()}
}

// Refused reports whether the agent's answer was refused (its copy stopped
// with ErrUnfilterable, the 502 already written).
func (f *Filter) Refused() bool { return f.refused }

// Header returns the response headers.
func (f *Filter) Header() http.Header { return f.w.Header() }

// Flush sends what was forwarded so far (complete events only).
func (f *Filter) Flush() { _ = http.NewResponseController(f.w).Flush() }

// Unwrap lets http.ResponseController reach deadlines and flushing.
func (f *Filter) Unwrap() http.ResponseWriter { return f.w }

func (f *Filter) WriteHeader(status int) {
	if f.headerDone || status < 200 {
		return // a second head (nothing to change now), or an informational one (not forwarded)
	}
	f.headerDone = true
	switch {
	case status/100 != 2:
		f.passthrough = true
	case !Filterable(status, f.Header()):
		f.refused = true
		h := f.Header()
		clear(h)
		maps.Copy(h, f.before)
		f.refuse(f.w)
		return
	default:
		f.Header().Del("Content-Length")
	}
	f.w.WriteHeader(status)
}

func (f *Filter) Write(p []byte) (int, error) {
	if !f.headerDone {
		f.WriteHeader(http.StatusOK)
	}
	if f.refused {
		return 0, ErrUnfilterable
	}
	if f.passthrough {
		return f.w.Write(p)
	}
	err := f.framer.Feed(p, func(event []byte) error {
		if _, all, ws, data := audience(event, f.memory); all || (ws != "" && ws == f.workspace) {
			if data != nil && f.learn != nil {
				f.learn(ws, data) // before the client reads the effect
			}
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

// IsStream reports whether a response is an SSE stream: 200 with a
// text/event-stream Content-Type (parameters allowed, e.g. "; charset=utf-8").
func IsStream(status int, h http.Header) bool {
	if status != http.StatusOK {
		return false
	}
	mt, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// Filterable reports whether a response is an event stream the SSE
// filter can read event by event: an SSE stream (IsStream) whose body
// is not encoded (no Content-Encoding, or identity; see hop.IdentityEncoding):
// compressed bytes are no events, and filtering them would pass or drop
// them blindly.
func Filterable(status int, h http.Header) bool {
	return IsStream(status, h) && hop.IdentityEncoding(h)
}
