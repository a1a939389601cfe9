// The request memory: which verified workspace each allowed /a2a call's
// request_id belongs to, so filtered event streams deliver its effects to
// that workspace alone (the gate shares one memory per server id across
// reloads: caddymodule's pools.RequestMemory).

package events

import (
	"sync"
	"time"
)

// Bounds of the request_id → workspace memory used by the SSE filter
// (docs/streaming.md, docs/workspaces.md "Fair by default").
const (
	requestMemorySize = 100_000       // entries in all
	requestMemoryTTL  = 2 * time.Hour // an effect later than this is not delivered filtered
	// requestMemoryShares: one workspace holds at most
	// requestMemorySize/requestMemoryShares entries (12,500).
	requestMemoryShares = 8
)

// Memory remembers, for allowed /a2a calls, which verified workspace
// each request_id belongs to (an entry older than requestMemoryTTL reads
// as absent). A request_id seen for two workspaces is marked conflicted and
// its effects go to no filtered stream. It runs no goroutine: expiry is
// checked on read. One memory per server id is shared by the gates of
// successive configs (caddymodule's requestMemories), so a reload does not
// make filtered streams lose the effects of calls made before it.
//
// Bounded, and fair: each entry is charged to the workspace that first
// made it (a conflicted one stays charged to it), and one workspace holds
// at most share entries. A workspace at its share loses its own oldest
// entry to a new one, never another workspace's. The memory as a whole
// holds size entries: full (which takes at least size/share workspaces),
// a new entry takes the oldest entry of a workspace holding the most. So
// no group of fewer than requestMemoryShares workspaces can make the
// memory forget another workspace's request_id (which would both stop its
// effects from reaching its filtered streams and let the request_id be
// claimed by someone else).
type Memory struct {
	mu    sync.Mutex
	size  int // entries in all
	share int // entries of one workspace
	total int

	entries    map[string]*rememberedRequest
	workspaces map[string]*workspaceShare
	// byCount[n] holds the workspaces holding n entries (1 ≤ n ≤ share);
	// most is the largest n with a workspace.
	byCount [][]*workspaceShare
	most    int
}

// rememberedRequest is the workspace of one request_id and when it
// expires, in its owner's list (oldest first).
type rememberedRequest struct {
	id         string
	owner      *workspaceShare
	conflicted bool // seen for two workspaces: delivered to nobody
	expires    time.Time
	prev, next *rememberedRequest
}

// workspaceShare is one workspace's entries, oldest first, and its place
// in Memory.byCount.
type workspaceShare struct {
	name        string
	first, last *rememberedRequest
	n, slot     int
}

// NewMemory returns an empty request memory.
func NewMemory() *Memory {
	return newMemory(requestMemorySize, requestMemorySize/requestMemoryShares)
}

func newMemory(size, share int) *Memory {
	return &Memory{size: size, share: share,
		entries:    make(map[string]*rememberedRequest),
		workspaces: make(map[string]*workspaceShare),
		byCount:    make([][]*workspaceShare, share+1)}
}

// Destruct implements caddy.Destructor: nothing to stop.
func (m *Memory) Destruct() error { return nil }

// Remember records that requestID's call was allowed for workspaceID.
func (m *Memory) Remember(requestID, workspaceID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if e := m.live(requestID, now); e != nil {
		if e.owner.name != workspaceID {
			e.conflicted = true
		}
		m.renew(e, now)
		return
	}
	m.add(requestID, workspaceID, now)
}

// Claim records requestID for workspaceID unless it is remembered (live)
// for another workspace, or seen for two: then it changes nothing and
// reports false (the references step refuses the call, so that one
// workspace cannot take over another's events: docs/workspaces.md).
func (m *Memory) Claim(requestID, workspaceID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if e := m.live(requestID, now); e != nil {
		if e.conflicted || e.owner.name != workspaceID {
			return false
		}
		m.renew(e, now)
		return true
	}
	m.add(requestID, workspaceID, now)
	return true
}

// Claimable reports whether Claim(requestID, workspaceID) would succeed
// now, changing nothing: the references step asks it before the store
// binds anything, so that a call refused for its request_id binds none of
// its other references.
func (m *Memory) Claimable(requestID, workspaceID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.live(requestID, time.Now())
	return e == nil || (!e.conflicted && e.owner.name == workspaceID)
}

// workspace is the one workspace requestID's call was allowed for; ok is
// false for an id never remembered, expired, or seen for two workspaces.
func (m *Memory) workspace(requestID string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.live(requestID, time.Now())
	if e == nil || e.conflicted {
		return "", false
	}
	return e.owner.name, true
}

// live is requestID's entry, nil when absent or expired (an expired one
// is dropped).
func (m *Memory) live(requestID string, now time.Time) *rememberedRequest {
	e := m.entries[requestID]
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		m.remove(e)
		return nil
	}
	return e
}

// renew makes e live requestMemoryTTL from now, its owner's newest entry.
func (m *Memory) renew(e *rememberedRequest, now time.Time) {
	e.expires = now.Add(requestMemoryTTL)
	s := e.owner
	if s.last == e {
		return
	}
	s.unlink(e)
	s.push(e)
}

// add records a new entry of requestID for workspaceID, first making room:
// the workspace's own oldest entry when it holds its share, else, the
// memory full, the oldest entry of a workspace holding the most.
func (m *Memory) add(requestID, workspaceID string, now time.Time) {
	s := m.workspaces[workspaceID]
	switch {
	case s != nil && s.n >= m.share:
		m.remove(s.first)
	case m.total >= m.size:
		m.remove(m.byCount[m.most][0].first)
	}
	s = m.workspaces[workspaceID] // removing its last entry may have dropped it
	if s == nil {
		s = &workspaceShare{name: workspaceID}
		m.workspaces[workspaceID] = s
	}
	e := &rememberedRequest{id: requestID, owner: s, expires: now.Add(requestMemoryTTL)}
	s.push(e)
	m.entries[requestID] = e
	m.total++
	m.count(s, s.n+1)
}

// remove forgets e.
func (m *Memory) remove(e *rememberedRequest) {
	s := e.owner
	s.unlink(e)
	delete(m.entries, e.id)
	m.total--
	m.count(s, s.n-1)
	if s.n == 0 {
		delete(m.workspaces, s.name)
	}
}

// count moves s to byCount[n].
func (m *Memory) count(s *workspaceShare, n int) {
	if s.n > 0 {
		b := m.byCount[s.n]
		last := b[len(b)-1]
		b[s.slot], last.slot = last, s.slot
		b[len(b)-1] = nil
		m.byCount[s.n] = b[:len(b)-1]
	}
	s.n = n
	if n > 0 {
		s.slot = len(m.byCount[n])
		m.byCount[n] = append(m.byCount[n], s)
	}
	if n > m.most {
		m.most = n
	}
	for m.most > 0 && len(m.byCount[m.most]) == 0 {
		m.most--
	}
}

// push appends e, the newest entry.
func (s *workspaceShare) push(e *rememberedRequest) {
	e.prev, e.next = s.last, nil
	if s.last != nil {
		s.last.next = e
	} else {
		s.first = e
	}
	s.last = e
}

// unlink takes e out of the list.
func (s *workspaceShare) unlink(e *rememberedRequest) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.first = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.last = e.prev
	}
	e.prev, e.next = nil, nil
}
