// The provisioned introspection (introspection/; docs/beyond-sdk.md,
// "Revocation before expiry (introspection)") and its readiness and status
// views; its rule of the decision is decision.go's (introspectDecision).

package gate

import (
	"strconv"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/introspection"
)

// Introspector is the provisioned introspection of a gate.
type Introspector struct {
	client *introspection.Client
}

// NewIntrospector is the introspection of client, for the targets it
// covers (introspection.Client.Covers).
func NewIntrospector(client *introspection.Client) *Introspector {
	return &Introspector{client: client}
}

// introspectionNotes are readiness notes: the endpoint's last call failed
// (covered calls are refused meanwhile; readiness itself is unchanged, the
// other calls still work).
func (g *Gate) introspectionNotes(lastError bool) []string {
	if g.intro == nil {
		return nil
	}
	h := g.intro.client.Health()
	if h.ConsecutiveFailures == 0 {
		return nil
	}
	note := "introspection failing: " + strconv.Itoa(h.ConsecutiveFailures) +
		" consecutive failed call(s) since at least " + h.LastFailure.UTC().Format(time.RFC3339)
	if lastError {
		note += ", last: " + redact.URLsIn(h.LastError)
	}
	return []string{note}
}

// introspectionStatus is the operator view of the endpoint (no secret).
func (g *Gate) introspectionStatus() map[string]any {
	h := g.intro.client.Health()
	st := map[string]any{"consecutive_failures": h.ConsecutiveFailures}
	if !h.LastGood.IsZero() {
		st["last_good"] = h.LastGood.UTC().Format(time.RFC3339)
	}
	if h.LastError != "" {
		st["last_error"] = h.LastError
		st["last_failure"] = h.LastFailure.UTC().Format(time.RFC3339)
	}
	return st
}
