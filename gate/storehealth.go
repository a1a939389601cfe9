// The idempotency store's health as the covered calls saw it: readiness
// carries a note while the last store call failed (docs/idempotency.md,
// "The stores, and what each survives"), as it does
// for the limits store and introspection.

package gate

import (
	"sync"
	"time"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// storeHealth is whether the last call to a shared store failed, since
// when, and with what error.
type storeHealth struct {
	mu      sync.Mutex
	down    bool
	since   time.Time
	lastErr string
}

func (h *storeHealth) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		h.down, h.since = true, time.Now()
	}
	h.lastErr = err.Error()
}

func (h *storeHealth) answered() {
	h.mu.Lock()
	h.down = false
	h.mu.Unlock()
}

// note is the readiness/status note of a failing store (failingNote).
func (h *storeHealth) note(what string, lastError bool) []string {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return nil
	}
	return []string{failingNote(what, h.since, "", h.lastErr, lastError)}
}

// failingNote is the readiness/status note of a shared store failing since
// since: "<what> failing since <time><detail>", and the last error (URLs
// redacted) only when withErr (status needs a key, readiness not).
func failingNote(what string, since time.Time, detail, lastErr string, withErr bool) string {
	n := what + " failing since " + since.UTC().Format(time.RFC3339) + detail
	if withErr {
		n += ", last: " + redact.URLsIn(lastErr)
	}
	return n
}

// observeIdempotency is the guard's observer: the metrics and warn lines
// of Metrics.observeIdempotency, and the store's health for readiness
// (a store error marks it failing; a claim, replay, conflict or record,
// each a store call that answered, marks it healthy again).
func (g *Gate) observeIdempotency(obs idempotency.Observer) idempotency.Observer {
	h := &storeHealth{}
	g.idemHealth = h
	ok := func(f func(idempotency.Key)) func(idempotency.Key) {
		return func(k idempotency.Key) {
			h.answered()
			if f != nil {
				f(k)
			}
		}
	}
	obs.Forward, obs.Replay, obs.Conflict, obs.Recorded = ok(obs.Forward), ok(obs.Replay), ok(obs.Conflict), ok(obs.Recorded)
	storeError := obs.StoreError
	obs.StoreError = func(k idempotency.Key, op string, err error) {
		h.failed(err)
		if storeError != nil {
			storeError(k, op, err)
		}
	}
	return obs
}
