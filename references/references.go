// Package references binds the objects an agent's callers name — jobs,
// cases, steps, draft sessions, DataResource items — to the workspace that
// first used or created them, so that a workspace holding a valid grant
// for a shared agent cannot reach another workspace's objects through it
// (docs/workspaces.md, "Workspaces sharing an agent").
//
// A binding is (agent, kind, value) → workspace. It lives TTL after its
// last use. Each workspace holds at most MaxPerWorkspace bindings: past
// that, its own least recently used binding goes first — never another
// workspace's; the memory and file stores hold at most MaxEntries in all
// (docs/workspaces.md, "Sizing"). The stores: memory (one process), file (bbolt: survives a
// restart) and Redis (single, Sentinel or Cluster: shared by replicas).
//
// The package knows nothing of HTTP or Caddy: the request-path step is
// gate/references.go.
package references

import (
	"context"
	"crypto/sha256"
	"errors"
	"time"
)

// The kinds of references (the field names of a v2 action or surface
// request, and DataResource items).
const (
	KindJob      = "job_id"
	KindCase     = "case_id"
	KindStep     = "step_id"
	KindDraft    = "draft_session_id"
	KindRequest  = "request_id"
	KindDataItem = "data_item"
)

// RequestFields are the request fields that can be bound, in the order a
// refusal names the first one (the default of the fields setting).
var RequestFields = []string{KindJob, KindCase, KindStep, KindDraft, KindRequest}

// Defaults and bounds of the settings (config/config.go holds the ranges).
const (
	// DefaultTTL: a binding lives this long after its last use.
	DefaultTTL = 720 * time.Hour
	// BytesPerBinding is what one binding costs the process in resident
	// memory (RSS), the Go runtime's room between collections included:
	// about 200 bytes of live heap, 350 to 400 of RSS (docs/workspaces.md,
	// "Sizing").
	BytesPerBinding = 400
	// DefaultMaxEntries bounds the bindings of the memory and file stores
	// in all: 100,000 × BytesPerBinding is about 38 MiB, sized for the
	// k8s base's 256 MiB container next to body_memory and the
	// idempotency store (docs/workspaces.md, "Sizing").
	DefaultMaxEntries = 100_000
	// PerWorkspaceShare: a workspace's default bound is MaxEntries / 8,
	// so that fewer than 8 workspaces cannot fill the store
	// (docs/workspaces.md, "Fair by default").
	PerWorkspaceShare = 8
)

// Ref is one reference a call carries or an answer names.
type Ref struct {
	// Kind is one of the Kind constants (for a DataResource item,
	// KindDataItem; Value is then "<resource>/<item_id>").
	Kind string
	// Value is the reference itself, as the call carries it.
	Value string
	// Create marks a reference the call creates (job.start's job_id, a
	// surface.load's draft_session_id): bound under unknown deny too.
	Create bool
}

// Outcome is a Resolve's decision.
type Outcome int

const (
	// Allowed: every reference is the caller's (now).
	Allowed Outcome = iota
	// Foreign: a reference is bound to another workspace.
	Foreign
	// Unknown: a reference is bound to nobody and the rule is deny.
	Unknown
)

// Result is a Resolve's outcome: Index is the refused reference's index
// in the refs given (Foreign, Unknown); Bound counts the bindings made.
type Result struct {
	Outcome Outcome
	Index   int
	Bound   int
}

// Learned counts a Learn's references: newly bound, already the
// workspace's, and bound to another workspace (Foreign: now Conflicted).
type Learned struct {
	Bound, Own, Foreign int
}

// Conflicted is the owner of a reference the agent named for one
// workspace while another held it (a workspace that used a guessed id
// before the agent created it for its rightful owner): it is refused to
// every workspace (Foreign) until it expires, so that neither can act on
// it through the sidecar (docs/workspaces.md, "Trust on first use, and its
// limits"). No workspace id holds a NUL.
const Conflicted = "\x00conflicted"

// ErrFull is a binding refused because the store holds MaxEntries
// bindings already (none of them expired).
var ErrFull = errors.New("the references store is full")

// Store keeps the bindings.
type Store interface {
	// Resolve decides refs for workspace of agent, atomically: when one is
	// bound to another workspace, Foreign; when one is bound to nobody,
	// not Create, and bindUnknown is false, Unknown; then nothing changes.
	// Otherwise the unbound ones are bound to workspace (first use wins),
	// the workspace's own renewed (TTL from now), and Allowed.
	Resolve(ctx context.Context, agent, workspace string, refs []Ref, bindUnknown bool) (Result, error)
	// Learn binds each ref bound to nobody to workspace and renews the
	// workspace's own; a ref bound to another workspace becomes
	// Conflicted (refused to every workspace).
	Learn(ctx context.Context, agent, workspace string, refs []Ref) (Learned, error)
	// Len is the number of bindings held (memory and file stores: exact;
	// Redis: -1, not counted).
	Len() int
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
	// SetLimits changes the bounds of a running store (a reload).
	SetLimits(Limits)
	// Close releases the store.
	Close() error
}

// Limits are a store's bounds.
type Limits struct {
	// TTL: a binding lives this long after its last use (default DefaultTTL).
	TTL time.Duration
	// MaxEntries bounds the bindings of the memory and file stores in all
	// (default DefaultMaxEntries): past it a new binding is ErrFull, never
	// another workspace's taken; the file store reads back at most this
	// many at open. The Redis store counts nothing (Redis's maxmemory
	// bounds it); there it only sets MaxPerWorkspace's default.
	MaxEntries int
	// MaxPerWorkspace bounds one workspace's bindings (default MaxEntries
	// / PerWorkspaceShare, at least 1; at most MaxEntries).
	MaxPerWorkspace int
}

// Resolved is l with its defaults applied.
func (l Limits) Resolved() Limits {
	if l.TTL <= 0 {
		l.TTL = DefaultTTL
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxPerWorkspace <= 0 {
		l.MaxPerWorkspace = max(1, l.MaxEntries/PerWorkspaceShare)
	}
	l.MaxPerWorkspace = min(l.MaxPerWorkspace, l.MaxEntries)
	return l
}

// key is one binding's identity: a hash of (agent, kind, value), so that a
// binding takes the same bounded room whatever the reference's length.
type key [sha256.Size]byte

func keyOf(agent string, r Ref) key {
	h := sha256.New()
	for _, s := range []string{agent, r.Kind, r.Value} {
		var n [4]byte
		l := len(s)
		n[0], n[1], n[2], n[3] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var k key
	h.Sum(k[:0])
	return k
}
