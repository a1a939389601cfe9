// The request memory: which verified workspace each allowed /a2a call's
// request_id belongs to, so filtered event streams deliver its effects to
// that workspace alone; one memory per server id, shared across reloads.

package caddymodule

import (
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// Bounds of the request_id → workspace memory used by the SSE filter.
const (
	requestMemorySize = 100_000          // entries
	requestMemoryTTL  = 2 * time.Hour    // an effect later than this is not delivered filtered
	conflictWorkspace = "\x00conflicted" // a request_id seen for two workspaces: delivered to nobody
)

// requestMemory remembers, for allowed /a2a calls, which verified workspace
// each request_id belongs to (bounded LRU; an entry older than
// requestMemoryTTL reads as absent). A request_id seen for two workspaces
// is marked conflicted and its effects go to no filtered stream. It runs no
// goroutine: expiry is checked on read. One memory per server id is shared
// by the gates of successive configs (requestMemories), so a reload does
// not make filtered streams lose the effects of calls made before it.
type requestMemory struct {
	mu    sync.Mutex
	cache *lru.Cache[string, rememberedRequest]
}

// rememberedRequest is the workspace of one request_id and when it expires.
type rememberedRequest struct {
	workspace string
	expires   time.Time
}

// requestMemories shares one requestMemory per server id across reloads.
var requestMemories = caddy.NewUsagePool()

func newRequestMemory() *requestMemory {
	c, _ := lru.New[string, rememberedRequest](requestMemorySize) // errors only for a size <= 0
	return &requestMemory{cache: c}
}

// acquireRequestMemory returns the request memory of serverID, shared with
// every gate holding it; pair it with releaseRequestMemory.
func acquireRequestMemory(serverID string) *requestMemory {
	v, _, _ := requestMemories.LoadOrNew(serverID, func() (caddy.Destructor, error) {
		return newRequestMemory(), nil
	})
	return v.(*requestMemory)
}

// releaseRequestMemory gives back one gate's reference.
func releaseRequestMemory(serverID string) { _, _ = requestMemories.Delete(serverID) }

// Destruct implements caddy.Destructor: nothing to stop.
func (m *requestMemory) Destruct() error { return nil }

func (m *requestMemory) remember(requestID, workspaceID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if prev, ok := m.cache.Get(requestID); ok && now.Before(prev.expires) && prev.workspace != workspaceID {
		workspaceID = conflictWorkspace
	}
	m.cache.Add(requestID, rememberedRequest{workspace: workspaceID, expires: now.Add(requestMemoryTTL)})
}

// workspace is the one workspace requestID's call was allowed for; ok is
// false for an id never remembered, expired, or seen for two workspaces.
func (m *requestMemory) workspace(requestID string) (string, bool) {
	r, ok := m.cache.Get(requestID)
	if !ok || !time.Now().Before(r.expires) || r.workspace == conflictWorkspace {
		return "", false
	}
	return r.workspace, true
}

// rememberForEvents records, for a token-verified call about to reach the
// agent, which workspace its request_id belongs to (replays and refusals
// never reach the agent, so they are not remembered).
func (g *gate) rememberForEvents(d decision, call *jsonrpc.Call) {
	if d.mode == verifiedToken {
		g.requests.remember(call.RequestID, d.claims.WorkspaceID)
	}
}
