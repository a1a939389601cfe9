// The decision's span attributes and the audit line's trace fields.

package gate

import (
	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"
)

// Span attribute keys of a decision (docs/beyond-sdk.md, "Traces"). Values are the audit
// line's: route class, target (action, surface or resource scope), the
// request's agent_slug and workspace_id, outcome (allow, deny), code,
// idempotency event, the introspection outcome and cache result, and the
// limits outcome and refusing rule.
// The claims' keys are supervaizer.<name> of claimFields (verifiedcontext.go).
const (
	attrPrefix       = "supervaizer."
	attrRoute        = attrPrefix + "route"
	attrTarget       = attrPrefix + "target"
	attrOutcome      = attrPrefix + "outcome"
	attrCode         = attrPrefix + "code"
	attrMode         = attrPrefix + memberMode
	attrIdempotency  = attrPrefix + "idempotency"
	attrIntro        = attrPrefix + "introspection"
	attrIntroCache   = attrPrefix + "introspection.cache"
	attrLimit        = attrPrefix + "limit"
	attrLimitRule    = attrPrefix + "limit.rule"
	attrReference    = attrPrefix + "reference"
	attrRefField     = attrPrefix + "reference.field"
	maxDecisionAttrs = 15
)

var (
	attrAgentSlug   = attrPrefix + claimFields[claimAgentSlug].name
	attrWorkspaceID = attrPrefix + claimFields[claimWorkspaceID].name
	attrGrantID     = attrPrefix + claimFields[claimGrantID].name
)

// traceDecision adds the decision's attributes to the request's span when
// it is recording (Caddy's tracing handler is active; a no-op span
// otherwise, without allocating). Called once per decision, by
// logDecision, with the final audit record.
func (a *audit) traceDecision() {
	s := a.x.span
	if s == nil || !s.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, maxDecisionAttrs)
	attrs = append(attrs, attribute.String(attrRoute, a.route), attribute.String(attrOutcome, a.outcome),
		attribute.String(attrCode, a.code))
	add := func(k, v string) {
		if v != "" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	add(attrTarget, a.target)
	add(attrAgentSlug, a.agentSlug)
	add(attrWorkspaceID, a.workspaceID)
	add(attrGrantID, a.grantID)
	add(attrMode, a.mode)
	add(attrIdempotency, a.idem)
	add(attrIntro, a.x.intro)
	add(attrIntroCache, a.x.introCache)
	add(attrLimit, a.x.limit)
	add(attrLimitRule, a.x.limitRule)
	add(attrReference, a.x.ref)
	add(attrRefField, a.x.refField)
	s.SetAttributes(attrs...)
}

// appendExtFields adds to an audit line the trace_id and span_id of a
// recording span (W3C hex forms), the introspection outcome and cache
// result, and the limits outcome, key kind and refusing rule, each only
// when set.
func (a *audit) appendExtFields(fields []zap.Field) []zap.Field {
	if s := a.x.span; s != nil && s.IsRecording() {
		if sc := s.SpanContext(); sc.IsValid() {
			fields = append(fields, zap.String("trace_id", sc.TraceID().String()), zap.String("span_id", sc.SpanID().String()))
		}
	}
	if a.x.intro != "" {
		fields = append(fields, zap.String("introspection", a.x.intro))
	}
	if a.x.introCache != "" {
		fields = append(fields, zap.String("introspection_cache", a.x.introCache))
	}
	if a.x.limit != "" {
		fields = append(fields, zap.String("limit", a.x.limit), zap.String("limit_key", a.x.limitKey))
	}
	if a.x.limitRule != "" {
		fields = append(fields, zap.String("limit_rule", a.x.limitRule))
	}
	if a.x.ref != "" {
		fields = append(fields, zap.String("reference", a.x.ref), zap.String("reference_field", a.x.refField))
	}
	return fields
}
