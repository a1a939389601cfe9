// The references step: the object references a call carries (job_id,
// case_id, step_id, draft_session_id, request_id, a DataResource item id)
// must belong to the caller's workspace; the ones an answer names are bound
// to it (references/; docs/workspaces.md, "Workspaces sharing an agent").
// Run after the workspace decision, before the limits, the idempotency
// guard (inside its forward for a covered call: a replay binds nothing)
// and the forward.

package gate

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/internal/hop"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/references"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// RefGate is a gate's provisioned references block.
type RefGate struct {
	// Store keeps the bindings (shared across reloads).
	Store references.Store
	// StoreName is memory, file or redis: named by the store's refusal and
	// its readiness note.
	StoreName string
	// Fields are the bound request fields (references.RequestFields' names).
	Fields map[string]bool
	// DataItems binds DataResource item ids.
	DataItems bool
	// LearnEvents learns from the agent's supervaizer.effect events.
	LearnEvents bool
	// BindUnknown is unknown bind (else deny).
	BindUnknown bool

	health storeHealth
}

// MaxLearnBytes bounds an answer the gate reads to learn references from
// (docs/workspaces.md): a larger answer is passed on as it comes and
// nothing is learned from it.
const MaxLearnBytes = 1 << 20

// Reference outcomes: the metric's outcome label, the
// {supervaizer.reference} placeholder, the span attribute.
const (
	refAllowed    = "allowed"        // every reference was the caller's already
	refBound      = "bound"          // allowed, and one or more bound to the caller now
	refForeign    = "foreign"        // refused: bound to another workspace
	refUnknown    = "unknown"        // refused: bound to nobody, unknown deny
	refStoreError = "store_error"    // refused: the store did not answer (fail closed)
	refFull       = "store_full"     // refused: the store holds its total bound
	refLearned    = "learned"        // bound from an answer or an event
	refLearnOther = "learn_conflict" // named for one workspace, held by another: now refused to all
)

// MsgReference is the refusal text of a reference the caller's workspace
// may not use, naming the field, never the owner: the same for a reference
// bound to another workspace and, under unknown deny, for one bound to
// nobody (no existence oracle).
func MsgReference(field string) string {
	return "Workspace authorization: " + field + " does not belong to this workspace"
}

// callRefs are the bound references a call carries, request_id apart
// (kept by the request memory: events.Memory.Claim, resolveCallRefs).
func (rg *RefGate) callRefs(call *jsonrpc.Call) []references.Ref {
	var refs []references.Ref
	add := func(kind, v string, create bool) {
		if v != "" && rg.Fields[kind] {
			refs = append(refs, references.Ref{Kind: kind, Value: v, Create: create})
		}
	}
	add(references.KindJob, call.JobID, call.IsAction() && call.Action == "job.start")
	add(references.KindCase, call.CaseID, false)
	add(references.KindStep, call.StepID, false)
	add(references.KindDraft, call.DraftSessionID, !call.IsAction())
	return refs
}

// resolveCallRefs runs the references step of an allowed /a2a call
// (nil: go on): request_id may be claimed in the request memory (a
// workspace cannot take over another's events: Claimable, which changes
// nothing), the others are resolved in the store in one call (which binds
// all or none), then request_id is claimed. A refused call binds nothing,
// but for a request_id claimed by another workspace between the two
// looks: the call is refused, its other references (the caller's own)
// stay bound.
func (g *Gate) resolveCallRefs(ctx context.Context, call *jsonrpc.Call, d decision, a *audit) *refusal.Refusal {
	rg := g.refs
	ws := d.ws
	if rg == nil || ws == "" {
		return nil
	}
	request := g.claimsRequest(call, d)
	if request && !g.requests.Claimable(call.RequestID, ws) {
		return g.refused(a, references.KindRequest, refForeign)
	}
	if rf := g.resolveRefs(ctx, call.AgentSlug, ws, rg.callRefs(call), a); rf != nil {
		return rf
	}
	if request && !g.requests.Claim(call.RequestID, ws) {
		return g.refused(a, references.KindRequest, refForeign)
	}
	return nil
}

// resolveRefs resolves refs for ws in the store: nil when allowed (the
// outcome noted in a), else the refusal.
func (g *Gate) resolveRefs(ctx context.Context, agent, ws string, refs []references.Ref, a *audit) *refusal.Refusal {
	if len(refs) == 0 {
		return nil
	}
	rg := g.refs
	res, err := rg.Store.Resolve(ctx, agent, ws, refs, rg.BindUnknown)
	switch {
	case err == references.ErrFull:
		rg.health.answered()
		return g.refused(a, refs[0].Kind, refFull)
	case err != nil:
		rg.health.failed(err)
		g.log.Warn("references store unavailable: calls carrying references are refused until it answers",
			zap.String("store", rg.StoreName), zap.String("error", redact.URLsIn(err.Error())))
		return g.refused(a, refs[0].Kind, refStoreError)
	}
	rg.health.answered()
	switch res.Outcome {
	case references.Foreign:
		return g.refused(a, refs[res.Index].Kind, refForeign)
	case references.Unknown:
		return g.refused(a, refs[res.Index].Kind, refUnknown)
	}
	outcome := refAllowed
	if res.Bound > 0 {
		outcome = refBound
	}
	for _, r := range refs {
		g.metrics.reference(r.Kind, outcome)
	}
	a.x.ref, a.x.refField = outcome, refs[0].Kind
	return nil
}

// refused notes a refusal in the audit record's references fields and the
// metric, and is its answer (audit code "reference_<outcome>"): a reference not the caller's
// is the workspace authorization refusal wrong_workspace naming the field
// (-32030 on /a2a, 403 on DataResource routes: "item_id"); the store
// unavailable (or full) is HTTP 503 naming the store, with Retry-After
// (-32603 data.code "references_<outcome>" on /a2a).
func (g *Gate) refused(a *audit, field, outcome string) *refusal.Refusal {
	g.metrics.reference(field, outcome)
	a.x.ref, a.x.refField = outcome, field
	reason := "reference_" + outcome // the audit code (refuseCall, refuseREST)
	if outcome == refStoreError || outcome == refFull {
		return &refusal.Refusal{Status: http.StatusServiceUnavailable, RPCCode: jsonrpc.CodeInternalError,
			RPCStatus: http.StatusServiceUnavailable, Code: "references_" + outcome,
			Message: g.refStoreMessage(outcome), RetryAfter: 1, Reason: reason}
	}
	named := field
	if field == references.KindDataItem {
		named = "item_id"
	}
	rf := grants.Refusal(grants.CodeWrongWorkspace, MsgReference(named), "")
	rf.Reason = reason
	return rf
}

func (g *Gate) refStoreMessage(outcome string) string {
	if outcome == refFull {
		return "References store (" + g.refs.StoreName + ") is full"
	}
	return "References store (" + g.refs.StoreName + ") unavailable"
}

// dataRef is a DataResource item's reference.
func dataRef(resource, item string) references.Ref {
	return references.Ref{Kind: references.KindDataItem, Value: resource + "/" + item}
}

// learn binds refs (named by an answer or an event) to ws, one store call
// per kind, so that the metric counts each kind as itself.
func (g *Gate) learn(ctx context.Context, agent, ws string, refs []references.Ref) {
	if len(refs) == 0 || ws == "" {
		return
	}
	for _, kind := range [...]string{references.KindJob, references.KindCase, references.KindStep, references.KindDataItem} {
		var same []references.Ref
		for _, r := range refs {
			if r.Kind == kind {
				same = append(same, r)
			}
		}
		if len(same) > 0 && !g.learnKind(ctx, agent, ws, same) {
			return
		}
	}
}

// learnKind binds refs, all of one kind, to ws; false when the store
// failed.
func (g *Gate) learnKind(ctx context.Context, agent, ws string, refs []references.Ref) bool {
	l, err := g.refs.Store.Learn(ctx, agent, ws, refs)
	if err != nil && err != references.ErrFull {
		g.refs.health.failed(err)
		g.log.Warn("references store unavailable: the references of an answer were not learned",
			zap.String("store", g.refs.StoreName), zap.String("error", redact.URLsIn(err.Error())))
		return false
	}
	g.refs.health.answered()
	if l.Bound > 0 {
		g.metrics.referenceN(refs[0].Kind, refLearned, l.Bound)
	}
	if l.Foreign > 0 {
		g.metrics.referenceN(refs[0].Kind, refLearnOther, l.Foreign)
	}
	return true
}

// answerRefs are the references an action's answer names (a JSON-RPC
// answer, complete): the job_state snapshot's job, case and step ids and
// those its effects name (effectPaths), the bound kinds only.
func (rg *RefGate) answerRefs(body []byte) []references.Ref {
	if !jsonrpc.IsJSONObject(body) { // strict: no duplicate key read two ways
		return nil
	}
	res := gjson.GetBytes(body, "result")
	if !res.IsObject() {
		return nil
	}
	var refs []references.Ref
	add := func(kind string, v gjson.Result) {
		if v.Type == gjson.String && v.Str != "" && rg.Fields[kind] {
			refs = append(refs, references.Ref{Kind: kind, Value: v.Str})
		}
	}
	js := res.Get("job_state")
	add(references.KindJob, js.Get("job.id"))
	js.Get("cases").ForEach(func(_, c gjson.Result) bool {
		add(references.KindCase, c.Get("id"))
		c.Get("steps").ForEach(func(_, s gjson.Result) bool {
			add(references.KindStep, s.Get("id"))
			return true
		})
		return true
	})
	rg.effectRefs(res.Get("effects"), add)
	return refs
}

// effectPaths are where an effect names a job, case or step (the SDK's
// V2Effect, docs/workspaces.md "Learned bindings"): its flat job_id,
// case_id and step_id keys, and the object an effect carries whole — a
// "case.created" effect's case, a "step.updated" effect's step, a job —
// by its id and the ids of its parents. A fixed list of paths, one level
// deep: learning never walks an effect's structure.
var effectPaths = [...]struct{ kind, path string }{
	{references.KindJob, "job_id"},
	{references.KindCase, "case_id"},
	{references.KindStep, "step_id"},
	{references.KindJob, "job.id"},
	{references.KindCase, "case.id"},
	{references.KindJob, "case.job_id"},
	{references.KindStep, "step.id"},
	{references.KindCase, "step.case_id"},
	{references.KindJob, "step.job_id"},
}

// effectRefs adds the job, case and step ids of each effect (effectPaths).
func (rg *RefGate) effectRefs(effects gjson.Result, add func(string, gjson.Result)) {
	effects.ForEach(func(_, e gjson.Result) bool {
		if !e.IsObject() {
			return true
		}
		for _, p := range effectPaths {
			add(p.kind, e.Get(p.path))
		}
		return true
	})
}

// EventRefs are the references of a supervaizer.effect event's data (the
// SDK's {"agent_slug", "action", "request_id", "effects": [...]}): its
// agent and the job, case and step ids its effects name (effectPaths).
func (rg *RefGate) EventRefs(data []byte) (agent string, refs []references.Ref) {
	if !jsonrpc.IsJSONObject(data) {
		return "", nil
	}
	agent = gjson.GetBytes(data, "agent_slug").Str
	rg.effectRefs(gjson.GetBytes(data, "effects"), func(kind string, v gjson.Result) {
		if v.Type == gjson.String && v.Str != "" && rg.Fields[kind] {
			refs = append(refs, references.Ref{Kind: kind, Value: v.Str})
		}
	})
	return agent, refs
}

// eventLearnTimeout bounds the store call of one event's learning: the
// stream waits for it.
const eventLearnTimeout = time.Second

// learnEvent binds the references of a supervaizer.effect event's data
// to ws, the workspace the request memory attributes it to
// (events.EffectLearner; learn_from_events): the job, case and step ids
// its effects name, for its agent when that agent is served here.
func (g *Gate) learnEvent(ws string, data []byte) {
	agent, refs := g.refs.EventRefs(data)
	if _, served := g.agents[agent]; !served || len(refs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventLearnTimeout)
	defer cancel()
	g.learn(ctx, agent, ws, refs)
}

// createdItemRef is the reference of the item a DataResource create
// answer holds: its top-level id (a string, or an integer as written).
func createdItemRef(resource string, body []byte) []references.Ref {
	if !jsonrpc.IsJSONObject(body) {
		return nil
	}
	id := gjson.GetBytes(body, "id")
	var v string
	switch {
	case id.Type == gjson.String:
		v = id.Str
	case id.Type == gjson.Number && id.Raw == strconv.FormatInt(id.Int(), 10):
		v = id.Raw
	}
	if v == "" {
		return nil
	}
	return []references.Ref{dataRef(resource, v)}
}

// referencesNotes are readiness notes: the references store is failing
// (calls carrying references are refused meanwhile).
func (g *Gate) referencesNotes(lastError bool) []string {
	if g.refs == nil {
		return nil
	}
	return g.refs.health.note("references store", lastError)
}

// learnWriter holds an answer of up to MaxLearnBytes until it is complete,
// to learn the references it names before the client can use them, then
// writes it on; a larger answer (by its Content-Length, or as it grows) is
// passed on as it comes and nothing is learned from it.
type learnWriter struct {
	w      http.ResponseWriter
	status int
	body   []byte
	passed bool
}

func (l *learnWriter) Header() http.Header { return l.w.Header() }

func (l *learnWriter) WriteHeader(s int) {
	switch {
	case l.passed:
		l.w.WriteHeader(s)
	case s < 200: // informational: passed on at once
		l.w.WriteHeader(s)
	case l.status == 0:
		l.status = s
		if n, err := strconv.ParseInt(l.w.Header().Get("Content-Length"), 10, 64); err == nil && n > MaxLearnBytes {
			l.pass()
		}
	}
}

func (l *learnWriter) Write(p []byte) (int, error) {
	if l.status == 0 {
		l.WriteHeader(http.StatusOK)
	}
	if l.passed {
		return l.w.Write(p)
	}
	if len(l.body)+len(p) <= MaxLearnBytes {
		l.body = append(l.body, p...)
		return len(p), nil
	}
	if err := l.pass(); err != nil {
		return 0, err
	}
	return l.w.Write(p)
}

// pass writes the head and what was held, and everything after as it comes.
func (l *learnWriter) pass() error {
	l.passed = true
	l.w.WriteHeader(l.status)
	_, err := l.w.Write(l.body)
	l.body = nil
	return err
}

// Flush flushes a passed-on answer; a held one is written whole at finish.
func (l *learnWriter) Flush() {
	if l.passed {
		_ = http.NewResponseController(l.w).Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (l *learnWriter) Unwrap() http.ResponseWriter { return l.w }

// complete returns the held answer when it is one to learn from: whole,
// 2xx, not encoded; nil otherwise.
func (l *learnWriter) complete() []byte {
	if l.passed || l.status/100 != 2 || !hop.IdentityEncoding(l.w.Header()) {
		return nil
	}
	return l.body
}

// finish writes a held answer on (nothing when it was passed on or
// nothing came).
func (l *learnWriter) finish() error {
	if l.passed || l.status == 0 {
		return nil
	}
	return l.pass()
}

// rememberForEvents records, for a token-verified call about to reach the
// agent, which workspace its request_id belongs to (replays and refusals
// never reach the agent, so they are not remembered), unless the
// references step claimed it already (claimsRequest: the claim records it).
func (g *Gate) rememberForEvents(d decision, call *jsonrpc.Call) {
	if d.mode == verifiedToken && !g.claimsRequest(call, d) {
		g.requests.Remember(call.RequestID, d.claims.WorkspaceID)
	}
}

// claimsRequest reports whether the references step claims call's
// request_id in the request memory (resolveCallRefs): request_id is one of
// the references' fields and the call's workspace is verified.
func (g *Gate) claimsRequest(call *jsonrpc.Call, d decision) bool {
	return g.refs != nil && d.ws != "" && g.refs.Fields[references.KindRequest] &&
		d.mode == verifiedToken && call.RequestID != "" && g.requests != nil
}
