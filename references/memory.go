package references

import (
	"container/list"
	"context"
	"sort"
	"sync"
	"time"
)

// MemoryStore keeps the bindings in this process: bounded per workspace
// (Limits.MaxPerWorkspace, its own least recently used binding dropped
// first) and in all (Limits.MaxEntries: past that a new binding is
// ErrFull). An expired binding reads as absent. Lost when the
// process ends (docs/workspaces.md, "What a lost memory store means").
type MemoryStore struct {
	mu  sync.Mutex
	lim Limits
	m   map[key]*entry
	ws  map[string]*workspaceList
	now func() time.Time
	// journal, when set (the file store), receives every change made
	// under mu, to write it through before the call returns.
	journal *journal
}

// entry is one binding.
type entry struct {
	k       key
	owner   *workspaceList
	lastUse time.Time
	elem    *list.Element // in owner.lru, least recently used first
}

// workspaceList is one workspace's bindings, least recently used first.
type workspaceList struct {
	name string
	lru  *list.List
}

// journal collects the changes of one call: the bindings put (bound or
// renewed) and deleted.
type journal struct {
	put []*entry
	del []key
}

// NewMemoryStore returns an empty memory store bounded by l.
func NewMemoryStore(l Limits) *MemoryStore {
	return &MemoryStore{lim: l.Resolved(), m: map[key]*entry{}, ws: map[string]*workspaceList{}, now: time.Now}
}

// SetLimits changes the bounds; a workspace over its new bound loses its
// least recently used bindings at its next binding.
func (s *MemoryStore) SetLimits(l Limits) {
	s.mu.Lock()
	s.lim = l.Resolved()
	s.mu.Unlock()
}

// Len is the number of bindings held (expired ones not yet dropped included).
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Ping always answers.
func (s *MemoryStore) Ping(context.Context) error { return nil }

// Close does nothing: the bindings go with the process.
func (s *MemoryStore) Close() error { return nil }

// Resolve implements Store.
func (s *MemoryStore) Resolve(_ context.Context, agent, workspace string, refs []Ref, bindUnknown bool) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resolveLocked(agent, workspace, refs, bindUnknown)
}

// Learn implements Store.
func (s *MemoryStore) Learn(_ context.Context, agent, workspace string, refs []Ref) (Learned, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.learnLocked(agent, workspace, refs)
}

func (s *MemoryStore) resolveLocked(agent, workspace string, refs []Ref, bindUnknown bool) (Result, error) {
	now := s.now()
	keys := make([]key, len(refs))
	owners := make([]*entry, len(refs))
	for i, r := range refs {
		keys[i] = keyOf(agent, r)
		e := s.lookup(keys[i], now)
		owners[i] = e
		switch {
		case e != nil && e.owner.name != workspace:
			return Result{Outcome: Foreign, Index: i}, nil
		case e == nil && !bindUnknown && !r.Create:
			return Result{Outcome: Unknown, Index: i}, nil
		}
	}
	res := Result{Outcome: Allowed}
	for _, e := range owners { // renewed first: a binding below then evicts older ones
		if e != nil {
			s.touch(e, now)
		}
	}
	for i := range refs {
		if owners[i] != nil || s.m[keys[i]] != nil { // the caller's, or twice in one call
			continue
		}
		if err := s.bind(keys[i], workspace, now); err != nil {
			return Result{}, err
		}
		res.Bound++
	}
	return res, nil
}

func (s *MemoryStore) learnLocked(agent, workspace string, refs []Ref) (Learned, error) {
	now := s.now()
	var l Learned
	for _, r := range refs {
		k := keyOf(agent, r)
		switch e := s.lookup(k, now); {
		case e == nil:
			if err := s.bind(k, workspace, now); err != nil {
				return l, err
			}
			l.Bound++
		case e.owner.name == workspace:
			s.touch(e, now)
			l.Own++
		default:
			if e.owner.name != Conflicted {
				s.drop(e)
				if err := s.bind(k, Conflicted, now); err != nil {
					return l, err
				}
			}
			l.Foreign++
		}
	}
	return l, nil
}

// lookup returns k's live binding, dropping it if it has expired.
func (s *MemoryStore) lookup(k key, now time.Time) *entry {
	e := s.m[k]
	if e == nil {
		return nil
	}
	if !now.Before(e.lastUse.Add(s.lim.TTL)) {
		s.drop(e)
		return nil
	}
	return e
}

// touch renews e: used now, most recently used of its workspace.
func (s *MemoryStore) touch(e *entry, now time.Time) {
	e.lastUse = now
	e.owner.lru.MoveToBack(e.elem)
	if s.journal != nil {
		s.journal.put = append(s.journal.put, e)
	}
}

// bind binds k to workspace; a workspace at its bound first loses its own
// least recently used binding; the store at its total bound first drops
// expired bindings, else refuses (ErrFull).
func (s *MemoryStore) bind(k key, workspace string, now time.Time) error {
	wl := s.ws[workspace]
	if wl == nil {
		wl = &workspaceList{name: workspace, lru: list.New()}
	}
	for wl.lru.Len() >= s.lim.MaxPerWorkspace {
		s.drop(wl.lru.Front().Value.(*entry))
	}
	if len(s.m) >= s.lim.MaxEntries {
		s.dropExpired(now)
		if len(s.m) >= s.lim.MaxEntries {
			return ErrFull
		}
	}
	s.ws[workspace] = wl
	e := &entry{k: k, owner: wl, lastUse: now}
	e.elem = wl.lru.PushBack(e)
	s.m[k] = e
	if s.journal != nil {
		s.journal.put = append(s.journal.put, e)
	}
	return nil
}

// drop removes e.
func (s *MemoryStore) drop(e *entry) {
	delete(s.m, e.k)
	e.owner.lru.Remove(e.elem)
	if e.owner.lru.Len() == 0 {
		delete(s.ws, e.owner.name)
	}
	if s.journal != nil {
		s.journal.del = append(s.journal.del, e.k)
	}
}

// dropExpired drops the expired bindings at the front of every workspace.
func (s *MemoryStore) dropExpired(now time.Time) {
	for _, wl := range s.ws {
		for wl.lru.Len() > 0 {
			e := wl.lru.Front().Value.(*entry)
			if now.Before(e.lastUse.Add(s.lim.TTL)) {
				break
			}
			s.drop(e)
		}
	}
}

// load puts bindings read back (the file store at open, at most
// MaxEntries live ones), each workspace's in the order of their last use;
// a workspace's beyond its bound (its least recently used) are left out.
func (s *MemoryStore) load(items []loaded) {
	sort.Slice(items, func(i, j int) bool { return items[i].lastUse.Before(items[j].lastUse) })
	for _, it := range items {
		wl := s.ws[it.workspace]
		if wl == nil {
			wl = &workspaceList{name: it.workspace, lru: list.New()}
			s.ws[it.workspace] = wl
		}
		e := &entry{k: it.k, owner: wl, lastUse: it.lastUse}
		e.elem = wl.lru.PushBack(e)
		s.m[it.k] = e
		for wl.lru.Len() > s.lim.MaxPerWorkspace {
			old := wl.lru.Front().Value.(*entry)
			delete(s.m, old.k)
			wl.lru.Remove(old.elem)
		}
	}
}

// loaded is one binding read back from a file.
type loaded struct {
	k         key
	workspace string
	lastUse   time.Time
}
