// The provisioned introspection (introspection/; docs/beyond-sdk.md,
// "Revocation before expiry (introspection)") and its readiness and status
// views, and the decision's last rule (introspectDecision).

package gate

import (
	"context"
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

// introspectDecision is the last rule of a token decision: when d allowed
// a verified token for a covered target, the endpoint must confirm the
// token is still active and agrees with it (grant_id, workspace_id, scope).
// Inactive or disagreeing: introspection.CodeRevoked; no usable answer:
// fail closed with introspection.CodeUnavailable (Verdict.Refusal). Any
// other d is returned as is, so a token the gate refuses anyway is never
// sent to the endpoint.
func (g *Gate) introspectDecision(ctx context.Context, target, token string, d decision) decision {
	in := g.intro
	if in == nil || !d.allowed() || d.mode != verifiedToken || d.claims == nil || !in.client.Covers(target) {
		return d
	}
	c := d.claims
	v, err := in.client.Check(ctx, token, introspection.Expect{
		GrantID: c.GrantID, WorkspaceID: c.WorkspaceID, Scopes: c.Scopes,
		ExpiresAt: time.Unix(c.ExpiresAt, 0),
	})
	g.metrics.introspectionCache(v.Source)
	if rf := v.Refusal(err); rf != nil {
		intro := v.Result.String()
		if err != nil {
			intro = "unavailable"
		}
		return decision{refusal: rf, claims: c, intro: intro, introCache: v.Source}
	}
	d.intro, d.introCache = "active", v.Source
	return d
}
