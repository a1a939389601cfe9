// The audit record of a decision and everything that reports it: its log
// line (the line's head encoded once per set of its first fields), its
// live placeholders and its span's attributes.

package gate

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// audit collects the facts of one decision for its log line. It never holds
// a token or an API key.
type audit struct {
	route, method       string
	target              string // action or surface or resource scope
	agentSlug           string
	workspaceID         string
	grantID, jti        string
	outcome, code, mode string
	idem                string // idempotency outcome: replay, idempotency_conflict, idempotency_in_progress...
	detail              string // our own diagnostic of a denial (the wire carries the SDK's text only)
	client              string // the client's address (the connection's remote address)
	iss, aud            string // of a signature-verified token refused on its claims (not secrets)

	x auditExt // placeholders, introspection, tracing (below)
}

func (a *audit) allow(code string) { a.outcome, a.code = "allow", code }
func (a *audit) deny(code string)  { a.outcome, a.code = "deny", code }

// recordDecision records d's context; an allowed d's outcome too (a
// refused one's is recorded by the writer that answers it, refused).
// The identity placeholders read x.verified: the
// claims of an allowed verified token only.
func (a *audit) recordDecision(d decision) {
	a.x.verified = nil
	a.x.intro, a.x.introCache = d.intro, d.introCache
	if d.claims != nil {
		a.grantID, a.jti = d.claims.GrantID, d.claims.JTI
	}
	if d.allowed() {
		a.outcome, a.code, a.mode = "allow", d.mode, d.mode
		if d.mode == verifiedToken {
			a.x.verified = d.claims
		}
	}
}

// logDecision writes one audit line: allow at info, deny at warn. The fields
// are built only when the logger takes the line, into an array from
// auditFieldPool (no allocation per line).
func (g *Gate) logDecision(a *audit, d time.Duration) {
	if a.outcome == "" {
		a.outcome = "allow"
	}
	g.metrics.decision(a.route, a.outcome, a.code)
	a.traceDecision()
	if a.outcome != "deny" && !g.auditAllows {
		return
	}
	level := zap.InfoLevel
	if a.outcome == "deny" {
		level = zap.WarnLevel
	}
	// The first four fields from a child logger that holds them encoded
	// (auditHeads), once this head was met.
	head := auditHead{route: a.route, method: a.method, outcome: a.outcome, code: a.code}
	log := g.heads.logger(g.log, head)
	ce := cmp.Or(log, g.log).Check(level, "supervaizer decision")
	if ce == nil {
		return
	}
	buf := auditFieldPool.Get().(*[auditFields]zap.Field)
	fields := buf[:0]
	if log == nil {
		fields = append(fields, zap.String("route", a.route), zap.String("method", a.method),
			zap.String("outcome", a.outcome), zap.String("code", a.code))
	}
	fields = append(fields, zap.Duration("duration", d), zap.String("client", a.client))
	add := func(k, v string) {
		if v != "" {
			fields = append(fields, zap.String(k, v))
		}
	}
	add("target", a.target)
	add(claimFields[claimAgentSlug].name, a.agentSlug)
	add(claimFields[claimWorkspaceID].name, a.workspaceID)
	add(claimFields[claimGrantID].name, a.grantID)
	add(claimFields[claimJTI].name, a.jti)
	add("idempotency", a.idem)
	add("iss", a.iss)
	add("aud", a.aud)
	add("detail", a.detail)
	fields = a.appendExtFields(fields)
	ce.Write(fields...)
	clear(buf[:min(len(fields), auditFields)]) // no string of this line stays reachable from the pool
	auditFieldPool.Put(buf)
	if log == nil {
		g.heads.keep(g.log, head)
	}
}

// auditFieldPool holds the field arrays of audit lines, reused from line to
// line: the cores of the gate's logger encode (or copy) the fields during
// Write and keep no reference to the slice, so the array is free again once
// ce.Write returns. (The one core that keeps fields, Caddy's start-up buffer
// of its default logger before a config is loaded, is never a module's
// logger: Caddy builds those from the loaded config's logs.)
var auditFieldPool = sync.Pool{New: func() any { return new([auditFields]zap.Field) }}

// auditFields is the most fields an audit line has: six always, nine when
// set, and appendExtFields' nine.
const auditFields = 6 + 9 + 9

func itoa(i int) string { return strconv.Itoa(i) }

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// The placeholders of a decision: its facts answered by name, live, for
// whatever reads them after the gate (Deps.Placeholders).

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

// The audit line's head encoded once: its first four fields (route,
// method, outcome, code) take few values, so each set of them is encoded
// once, into a child logger (zap's Logger.With), rather than on every line.

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
