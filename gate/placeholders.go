// The placeholders of a decision: its facts answered by name, live, for
// whatever reads them after the gate (Deps.Placeholders).

package gate

import (
	"net/http"
	"strings"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"go.opentelemetry.io/otel/trace"
)

// exposeDecision keeps r's span for the audit line and the trace, and
// hands a's placeholders to Deps.Placeholders (nil, as in benchmarks: the
// span only).
func (g *Gate) exposeDecision(r *http.Request, a *audit) {
	a.x.span = trace.SpanFromContext(r.Context())
	if g.placeholders != nil {
		g.placeholders(r, a.placeholder)
	}
}

// Placeholders of a decision, answered by (*audit).placeholder through
// Deps.Placeholders (in Caddy: the request's caddy.Replacer; docs/beyond-sdk.md, "The verified context in the Caddyfile (placeholders)"). They are live: each
// lookup reads the request's audit record, so a handler after
// supervaizer_auth, a deferred `header`, a matcher, `log_append` and the
// access log all see the decision as it stands when they look (allow or
// deny, with its code), and never see a value before the gate set it.
const (
	placeholderPrefix = "supervaizer."
	placeholderUserID = "http.auth.user.id" // Caddy's caddyauth convention: the verified workspace_id
)

// auditExt is what the additive features (placeholders, introspection,
// tracing) keep in a request's audit record. It never holds a token.
type auditExt struct {
	// verified is the token's claims when the decision allowed a verified
	// token (mode token); nil otherwise (denials, bootstrap, local mode):
	// the only source of the identity placeholders.
	verified *grants.Claims
	// intro and introCache are the introspection outcome (active,
	// inactive, mismatch, unavailable) and how it was known (hit, miss,
	// shared); "" when the call was not introspected.
	intro, introCache string
	// limit is the limits outcome (allowed, allowed_local_fallback,
	// rate_limited, concurrency_limited; "" when no rule matched),
	// limitRule the refusing rule, limitKey what the key was made of
	// (workspace, transport_key); limits.go.
	limit, limitRule, limitKey string
	// ref is the references outcome (allowed, bound, foreign, unknown,
	// store_error, store_full; "" when the call carried none checked),
	// refField the field it concerns (the refused one); references.go.
	ref, refField string
	// keyFP is the accepted transport key's fingerprint (never the key):
	// the limits key of a call without a verified workspace. Not logged.
	keyFP string
	// span is the request's span (Caddy's tracing handler), a no-op span
	// when tracing is off.
	span trace.Span
}

// decided keeps the verified identity of d when d allowed a verified token,
// and its introspection outcome (called by audit.decision).
func (x *auditExt) decided(d decision) {
	x.verified = nil
	if d.allowed() && d.mode == verifiedToken {
		x.verified = d.claims
	}
	x.intro, x.introCache = d.intro, d.introCache
}

// placeholder answers key when it is one of the decision's placeholders
// (Deps.Placeholders' lookup): ("", true) for a known one without a value, so a
// `header` or `log_append` writes an empty value rather than the
// placeholder's text. The identity placeholders (http.auth.user.id, and
// the identity claims of claimFields: grant_id, workspace_id,
// workspace_slug, agent_id, agent_slug, jti) are
// filled only while the outcome is allow and the token was verified; the
// others describe the decision: mode (token, bootstrap, local), route
// (the route class), target (action, surface or resource scope), outcome
// (allow, deny; "" before the decision), code (the audit code),
// introspection (active, inactive, mismatch, unavailable), idempotency
// (replay, idempotency_conflict, ...; final once the call was answered) and
// limit (allowed, allowed_local_fallback, rate_limited, concurrency_limited;
// "" when no limits rule matched) and reference (allowed, bound, foreign,
// unknown, store_error, store_full; "" when no reference was checked).
func (a *audit) placeholder(key string) (any, bool) {
	if key == placeholderUserID {
		return a.identity(&claimFields[claimWorkspaceID]), true
	}
	name, ok := strings.CutPrefix(key, placeholderPrefix)
	if !ok {
		return nil, false
	}
	if f := identityClaim(name); f != nil {
		return a.identity(f), true
	}
	switch name {
	case memberMode:
		if a.outcome != "allow" {
			return "", true
		}
		return a.mode, true
	case "route":
		return a.route, true
	case "target":
		return a.target, true
	case "outcome":
		return a.outcome, true
	case "code":
		return a.code, true
	case "introspection":
		return a.x.intro, true
	case "idempotency":
		return a.idem, true
	case "limit":
		return a.x.limit, true
	case "reference":
		return a.x.ref, true
	}
	return nil, false
}

// identity is claim f of the verified claims while the decision allows a
// verified token, else "".
func (a *audit) identity(f *claimField) string {
	if a.outcome != "allow" || a.x.verified == nil {
		return ""
	}
	return f.value(a.x.verified)
}
