// Server-Sent Events as the gate reads them: cutting a byte stream into
// whole events (Framer, lineEnd, eventEnd), splitting an event into its
// lines, and deciding who may see it (Audience). Pure byte handling:
// no Caddy, no net/http.

package events

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// requestWorkspaces is what the parser asks of the request memory
// (Memory): the one workspace a request_id's call was allowed for,
// ok false when unknown, expired or seen for two workspaces.
type requestWorkspaces interface {
	workspace(requestID string) (string, bool)
}

// MaxEvent bounds one event, in bytes: a larger one is never held whole
// (see Framer).
const MaxEvent = 1 << 20

// Framer cuts a byte stream into whole SSE events (see eventEnd). An
// event larger than MaxEvent bytes is never emitted: its bytes go, in
// order and in pieces, to the feed's oversized callback (when not nil), as
// they arrive, up to and including the blank line that ends it. The framer
// holds at most MaxEvent bytes plus one feed.
type Framer struct {
	pending  []byte
	skipping bool // inside an oversized event: pending is a marker byte and its last bytes
}

// feed appends p and calls emit with every event it completes, in order
// (event is only valid during the call), and oversized (if not nil) with
// every piece of an oversized event, the last piece flagged with end. It
// stops at the first error of either and returns it.
func (f *Framer) Feed(p []byte, emit func(event []byte) error, oversized func(piece []byte, end bool) error) error {
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
	if len(f.pending) > MaxEvent {
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

// Audience reads one complete event once: its name (the last "event"
// field, "" when none), and who may see it: all is true for
// supervaizer.connected, supervaizer.heartbeat and comment-only events
// (every stream); otherwise workspace is the verified workspace whose call
// produced a supervaizer.effect (its data one JSON object without duplicate
// keys, data.request_id a string the gate remembered for exactly one
// workspace), or "" when no workspace-filtered stream may see it.
// Unfiltered streams see every event.
func Audience(event []byte, memory requestWorkspaces) (name string, all bool, workspace string) {
	name, all, workspace, _ = audience(event, memory)
	return name, all, workspace
}

// EffectLearner receives the data of each supervaizer.effect event
// attributed to a workspace (the references step's learning from events:
// gate/references.go). It must not keep data.
type EffectLearner func(workspace string, data []byte)

// audience is Audience, with the event's data when it is an effect
// attributed to workspace.
func audience(event []byte, memory requestWorkspaces) (name string, all bool, workspace string, effect []byte) {
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
		return name, true, "", nil
	case "supervaizer.effect":
		if !jsonrpc.IsJSONObject(data) { // no duplicate request_id a browser would read differently
			return name, false, "", nil
		}
		reqID := gjson.GetBytes(data, "request_id")
		if reqID.Type != gjson.String {
			return name, false, "", nil
		}
		if ws, ok := memory.workspace(reqID.Str); ok {
			return name, false, ws, data
		}
		return name, false, "", nil
	}
	return name, onlyComments, "", nil
}
