// The process-wide memory budget of the /a2a bodies held while the gate
// decides (body_memory; docs/errors.md, "Body limits"), each workspace's
// share of it (docs/workspaces.md, "Fair by default"), and whom a body is
// charged to: its workspace, known from the token in its header before the
// body is read (bodyOwner), so that no workspace can fill the budget for
// the others while bodies arrive.

package gate

import (
	"net/http"
	"sync"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/grants"
)

// bodyRetryAfter is the Retry-After, in seconds, of a call refused because
// the budget is spent: about the time a held body takes to be decided and
// forwarded.
const bodyRetryAfter = 1

// CodeBodyShareFull is the audit code (and decisions metric code) of an
// /a2a call refused because its workspace holds more than its share of
// body_memory and the rest is taken: on the wire it is the same retryable
// 503 server_busy as a full budget (docs/errors.md, "Body limits").
const CodeBodyShareFull = "body_memory_workspace_share_full"

// shareGroup is the number of owners the share rule protects against: no
// group of fewer than shareGroup owners can hold so much that another
// owner's share does not fit (the idempotency store's rule too:
// docs/workspaces.md, "Fair by default").
const shareGroup = 8

// bodyBudget counts the bytes of request bodies held at once by every gate
// of the process, in all and by owner: the workspace a body is charged to
// (bodyOwner, chargeTo; "" for a body with no verified workspace). Its capacity is
// the largest body_memory of the gates loaded (two handlers of one config,
// or the old and the new config during a reload, share it). A reservation
// never waits: it fits or is refused.
//
// The share rule: every owner may always hold `share` bytes, and the bytes
// owners hold beyond their shares come from a pool of capacity − 8 × share.
// So owners fewer than eight hold at most 7 × share + pool = capacity −
// share: another owner's share always fits. share is the largest that
// still lets one owner hold a body of the largest max_body_a2a (share +
// pool ≥ max_body_a2a): min(capacity/8, (capacity − max_body_a2a)/7).
type bodyBudget struct {
	mu       sync.Mutex
	used     int64
	capacity int64
	maxBody  int64            // the largest max_body_a2a of the gates loaded
	share    int64            // what each owner may always hold (bodyShare)
	over     int64            // the bytes owners hold beyond their shares
	owners   map[string]int64 // each owner's bytes, while it holds some
	gates    map[*Gate]int64  // each loaded gate's body_memory
	// refusedShare and refusedFull count the reservations refused since
	// the process started, beyond an owner's share and with the budget
	// full: seen on the status page while the refused bodies still
	// arrive (the decisions metric counts them once answered).
	refusedShare, refusedFull int64
}

// newBodyBudget is a budget of capacity bytes for bodies of at most
// maxBody bytes.
func newBodyBudget(capacity, maxBody int64) *bodyBudget {
	b := &bodyBudget{capacity: capacity, maxBody: maxBody, owners: map[string]int64{}, gates: map[*Gate]int64{}}
	b.share = bodyShare(capacity, maxBody)
	return b
}

// BodyMemory is the process's budget.
var BodyMemory = newBodyBudget(config.DefaultBodyMemory, config.DefaultMaxBodyA2A)

// bodyShare is the bytes each owner may always hold of a budget of
// capacity bytes whose largest body is maxBody bytes (bodyBudget).
func bodyShare(capacity, maxBody int64) int64 {
	return max(min(capacity/shareGroup, (capacity-maxBody)/(shareGroup-1)), 0)
}

// join adds g, with its budget v, to the gates sharing the budget, and
// reports the capacity now in force and whether another loaded gate asked
// for a different one. g's max_body_a2a (MaxBodyA2A, set before) counts
// towards the largest body the share rule lets one owner hold.
func (b *bodyBudget) Join(g *Gate, v int64) (capacity int64, differs bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.gates {
		differs = differs || o != v
	}
	b.gates[g] = v
	b.resize()
	return b.capacity, differs
}

// leave removes g; the capacity becomes the largest of the others'.
func (b *bodyBudget) Leave(g *Gate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.gates[g]; ok {
		delete(b.gates, g)
		b.resize()
	}
}

// resize (under mu) sets the capacity to the largest budget of the gates
// loaded and the largest body to the largest of their max_body_a2a, and
// the share from both; with none, the previous ones stay for the requests
// still running.
func (b *bodyBudget) resize() {
	if len(b.gates) == 0 {
		return
	}
	b.capacity, b.maxBody = 0, 0
	for g, v := range b.gates {
		b.capacity = max(b.capacity, v)
		b.maxBody = max(b.maxBody, g.maxBodyA2A)
	}
	b.share = bodyShare(b.capacity, b.maxBody)
	b.over = 0
	for _, u := range b.owners {
		b.over += max(u-b.share, 0)
	}
}

// chargeTo is whom a body is charged to: the workspace of its verified
// token (id; "" for every body without one), or, unshared, nobody in
// particular (local mode: no workspace is verified, the budget is first
// come first served; bodyOwner).
type chargeTo struct {
	id       string
	unshared bool
}

// reserve takes n bytes of the budget for owner if they fit: the whole
// budget has them, and what the owner would hold beyond its share fits
// the pool beside the others' (bodyBudget; an unshared owner has no
// share). It reports whether they did and, when not, whether the owner
// would have held more than its share (the refusal is then
// CodeBodyShareFull).
func (b *bodyBudget) reserve(to chargeTo, n int64) (ok, overShare bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if to.unshared {
		if n > b.capacity-b.used {
			b.refusedFull++
			return false, false
		}
		b.used += n
		return true, false
	}
	owner := to.id
	u := b.owners[owner]
	overBefore, overAfter := max(u-b.share, 0), max(u+n-b.share, 0)
	pool := b.capacity - shareGroup*b.share
	if n > b.capacity-b.used || b.over-overBefore+overAfter > pool {
		if overAfter > 0 {
			b.refusedShare++
		} else {
			b.refusedFull++
		}
		return false, overAfter > 0
	}
	b.used += n
	b.over += overAfter - overBefore
	b.owners[owner] = u + n
	return true, false
}

// release gives back n bytes reserved for owner.
func (b *bodyBudget) release(to chargeTo, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if to.unshared {
		b.mu.Unlock()
		return
	}
	owner := to.id
	u := b.owners[owner]
	b.over -= max(u-b.share, 0) - max(u-n-b.share, 0)
	if u -= n; u > 0 {
		b.owners[owner] = u
	} else {
		delete(b.owners, owner)
	}
	b.mu.Unlock()
}

// inUse is the bytes reserved now (for tests).
func (b *bodyBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// status is the budget as /_sidecar/status shows it (ops.go): its
// capacity, each workspace's share, the bytes held now and by how many
// owners (never which: the budget's state, not its users), and the
// reservations refused so far.
func (b *bodyBudget) status() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return map[string]int64{"capacity": b.capacity, "workspace_share": b.share,
		"in_use": b.used, "beyond_shares": b.over, "owners_holding": int64(len(b.owners)),
		"refused_workspace_share": b.refusedShare, "refused_full": b.refusedFull}
}

// bodyHold is what one body holds of BodyMemory: n bytes charged to to.
type bodyHold struct {
	to chargeTo
	n  int64
}

// release gives the hold back (once: it is zero afterwards).
func (h *bodyHold) release() {
	BodyMemory.release(h.to, h.n)
	h.n = 0
}

// bodyOwner is whom an /a2a body is charged to (bodyBudget): in token
// mode, the workspace_id of the workspace token in the request's header
// when it verifies (signature, issuer, audience, times, server: the checks
// that do not need the call; what it found goes to the decision as
// earlyToken), else ""
// (bootstrap calls, a missing or refused token: one share between them).
// In local mode no workspace is verified: bodies are unshared, the budget
// first come first served as a whole. It refuses nothing: the decision,
// after the body, gives the answers it always gave. An unknown kid does
// not trigger a JWKS refresh here (the call's agent is not known yet):
// that token is charged to "" and the decision's check may refresh.
func (g *Gate) bodyOwner(r *http.Request) (chargeTo, earlyToken) {
	if g.mode == ModeLocal {
		return chargeTo{unshared: true}, earlyToken{}
	}
	values := r.Header[headerWorkspaceAuth]
	if g.mode != ModeToken || g.verifier == nil || len(values) == 0 {
		return chargeTo{}, earlyToken{}
	}
	claims, err := g.verifier.VerifyWith(r.Context(), grants.TokenFromHeader(values), grants.VerifyOptions{})
	if err != nil {
		return chargeTo{}, earlyToken{ran: true, err: err}
	}
	return chargeTo{id: claims.WorkspaceID}, earlyToken{ran: true}
}

// earlyToken is what bodyOwner's verification found, for the decision's
// (decideToken): ran, the token was verified and observed (metrics) then,
// so the decision's check is not observed again; err, its refusal, which
// the decision gives again without a second verification when it is
// settled (grants.Settled: a bad signature is not checked twice).
type earlyToken struct {
	ran bool
	err error
}
