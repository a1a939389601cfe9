// The audit line's head encoded once: its first four fields (route,
// method, outcome, code) take few values, so each set of them is encoded
// once, into a child logger (zap's Logger.With), rather than on every line.

package gate

import (
	"net/http"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
)

// auditHead is the first four fields of an audit line, in their order.
type auditHead struct{ route, method, outcome, code string }

// maxAuditHeads bounds auditHeads' map; a line whose head is past it is
// encoded field by field, as without the map. The route classes, outcomes
// and codes are fixed sets; methods past the standard ones are never kept
// (auditMethods).
const maxAuditHeads = 512

// auditMethods are the methods a head is kept for: any other is the
// client's own text, encoded on its line.
var auditMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// auditHeads maps the heads met so far to child loggers of base holding
// them (zap encodes a child's fields once, when it is made, and writes
// them before a line's own fields: the line's bytes are those of the four
// fields logged first, whatever the encoder). Reads take no lock (an
// immutable snapshot behind an atomic pointer); a new head copies the map
// under mu. Its zero value is empty.
type auditHeads struct {
	snap atomic.Pointer[auditHeadSet]
	mu   sync.Mutex
}

// auditHeadSet is one snapshot: the children of base.
type auditHeadSet struct {
	base *zap.Logger
	logs map[auditHead]*zap.Logger
}

// logger is base's child holding h, or nil when there is none yet (then
// the caller encodes h itself and calls keep once its line is written).
func (hs *auditHeads) logger(base *zap.Logger, h auditHead) *zap.Logger {
	if s := hs.snap.Load(); s != nil && s.base == base {
		return s.logs[h]
	}
	return nil
}

// keep makes base's child for h, for the next lines with that head, unless
// the map is full or h's method is not a standard one.
func (hs *auditHeads) keep(base *zap.Logger, h auditHead) {
	if !auditMethods[h.method] {
		return
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	old := hs.snap.Load()
	if old != nil && old.base == base {
		if _, ok := old.logs[h]; ok || len(old.logs) >= maxAuditHeads {
			return
		}
	} else {
		old = nil // another logger's children (a gate's logger is set once; tests may set it again)
	}
	next := &auditHeadSet{base: base, logs: make(map[auditHead]*zap.Logger, 1+lenHeads(old))}
	if old != nil {
		for k, v := range old.logs {
			next.logs[k] = v
		}
	}
	next.logs[h] = base.With(zap.String("route", h.route), zap.String("method", h.method),
		zap.String("outcome", h.outcome), zap.String("code", h.code))
	hs.snap.Store(next)
}

func lenHeads(s *auditHeadSet) int {
	if s == nil {
		return 0
	}
	return len(s.logs)
}
