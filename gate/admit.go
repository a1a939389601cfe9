// The one check an allowed /a2a call passes just before it is forwarded,
// plain or covered (Gate.forward, idempotency.go): its limits, its
// references, the request memory, its verified context.

package gate

import (
	"context"
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// admitForward is what an allowed call passes just before it is
// forwarded, by the one forward (Gate.forward, idempotency.go), on the
// plain path and inside the guard alike, so that a replay binds and counts
// nothing and a waiting retry holds no slot: its limits first (admitLimits,
// limits.go: a call they refuse has bound and claimed nothing), then its
// references (resolveCallRefs, references.go: a refusal there gives the
// limits' slot back; the rate token stays spent, as for any call the
// caller sent), then the request memory for the event filter (only calls
// that reach the agent can have effects) and the verified context
// (injectVerified, verifiedcontext.go: only a request that is forwarded
// carries it). A refusal means nothing was sent; release gives the
// limits' slot back when the forward ends.
func (g *Gate) admitForward(ctx context.Context, h http.Header, call *jsonrpc.Call, d decision, a *audit) (release func(), rf *refusal.Refusal) {
	lc := newLimitCall(call.AgentSlug, d, a.x.keyFP, limitTarget(call))
	if rf, release = g.admitLimits(ctx, a, lc); rf != nil {
		return nil, rf
	}
	if rf := g.resolveCallRefs(ctx, call, d, a); rf != nil {
		release()
		return nil, rf
	}
	g.rememberForEvents(d, call)
	g.injectVerified(h, d)
	return release, nil
}
