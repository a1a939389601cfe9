// The audit record of a decision and its log line.

package gate

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
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

	x auditExt // placeholders, introspection, tracing (placeholders.go)
}

func (a *audit) allow(code string) { a.outcome, a.code = "allow", code }
func (a *audit) deny(code string)  { a.outcome, a.code = "deny", code }

func (a *audit) call(c *jsonrpc.Call) {
	a.target, a.agentSlug, a.workspaceID = c.Target(), c.AgentSlug, c.WorkspaceID
}

// decision records d's context; an allowed d's outcome too (a refused
// one's is recorded by the writer that answers it, refused).
func (a *audit) decision(d decision) {
	a.x.decided(d)
	if d.claims != nil {
		a.grantID, a.jti = d.claims.GrantID, d.claims.JTI
	}
	if d.allowed() {
		a.allow(d.mode)
		a.mode = d.mode
	}
}

// refused records the refusal rf answered: outcome deny, its audit code,
// its detail and, for a token refused on its claims, the token's
// identifying claims. A nil a records nothing (refuseCall).
func (a *audit) refused(rf *refusal.Refusal) {
	if a == nil {
		return
	}
	a.deny(rf.AuditCode())
	if rf.Detail != "" {
		a.detail = rf.Detail
	}
	if t := rf.Token; t != nil {
		a.grantID, a.jti, a.iss = t.GrantID, t.JTI, t.Issuer
		a.aud = strings.Join(t.Audience, " ")
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
	ce := g.log.Check(level, "supervaizer decision")
	if ce == nil {
		return
	}
	buf := auditFieldPool.Get().(*[auditFields]zap.Field)
	fields := append(buf[:0],
		zap.String("route", a.route),
		zap.String("method", a.method),
		zap.String("outcome", a.outcome),
		zap.String("code", a.code),
		zap.Duration("duration", d),
		zap.String("client", a.client),
	)
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
}

// auditFieldPool holds the field arrays of audit lines, reused from line to
// line: the cores of the gate's logger encode (or copy) the fields during
// Write and keep no reference to the slice, so the array is free again once
// ce.Write returns. (The one core that keeps fields, Caddy's start-up buffer
// of its default logger before a config is loaded, is never a module's
// logger: Caddy builds those from the loaded config's logs.)
var auditFieldPool = sync.Pool{New: func() any { return new([auditFields]zap.Field) }}

// auditFields is the most fields an audit line has: six always, nine when
// set, and appendExtFields' nine (tracing.go).
const auditFields = 6 + 9 + 9

func itoa(i int) string { return strconv.Itoa(i) }

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
