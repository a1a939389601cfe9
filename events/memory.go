// The request memory: which verified workspace each allowed /a2a call's
// request_id belongs to, so filtered event streams deliver its effects to
// that workspace alone (the gate shares one memory per server id across
// reloads: caddymodule's acquireRequestMemory).

package events

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Bounds of the request_id → workspace memory used by the SSE filter.
const (
	requestMemorySize = 100_000          // entries
	requestMemoryTTL  = 2 * time.Hour    // an effect later than this is not delivered filtered
	conflictWorkspace = "\x00conflicted" // a request_id seen for two workspaces: delivered to nobody
)

// Memory remembers, for allowed /a2a calls, which verified workspace
// each request_id belongs to (bounded LRU; an entry older than
// requestMemoryTTL reads as absent). A request_id seen for two workspaces
// is marked conflicted and its effects go to no filtered stream. It runs no
// goroutine: expiry is checked on read. One memory per server id is shared
// by the gates of successive configs (caddymodule's requestMemories), so a reload does
// not make filtered streams lose the effects of calls made before it.
type Memory struct {
	mu    sync.Mutex
	cache *lru.Cache[string, rememberedRequest]
}

// rememberedRequest is the workspace of one request_id and when it expires.
type rememberedRequest struct {
	workspace string
	expires   time.Time
}

// NewMemory returns an empty request memory.
func NewMemory() *Memory {
	c, _ := lru.New[string, rememberedRequest](requestMemorySize) // errors only for a size <= 0
	return &Memory{cache: c}
}

// Destruct implements caddy.Destructor: nothing to stop.
func (m *Memory) Destruct() error { return nil }

// Remember records that requestID's call was allowed for workspaceID.
func (m *Memory) Remember(requestID, workspaceID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if prev, ok := m.cache.Get(requestID); ok && now.Before(prev.expires) && prev.workspace != workspaceID {
		workspaceID = conflictWorkspace
	}
	m.cache.Add(requestID, rememberedRequest{workspace: workspaceID, expires: now.Add(requestMemoryTTL)})
}

// Claim records requestID for workspaceID unless it is remembered (live)
// for another workspace, or seen for two: then it changes nothing and
// reports false (the references step refuses the call, so that one
// workspace cannot take over another's events: docs/workspaces.md).
func (m *Memory) Claim(requestID, workspaceID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if prev, ok := m.cache.Get(requestID); ok && now.Before(prev.expires) && prev.workspace != workspaceID {
		return false
	}
	m.cache.Add(requestID, rememberedRequest{workspace: workspaceID, expires: now.Add(requestMemoryTTL)})
	return true
}

// workspace is the one workspace requestID's call was allowed for; ok is
// false for an id never remembered, expired, or seen for two workspaces.
func (m *Memory) workspace(requestID string) (string, bool) {
	r, ok := m.cache.Get(requestID)
	if !ok || !time.Now().Before(r.expires) || r.workspace == conflictWorkspace {
		return "", false
	}
	return r.workspace, true
}
