package idempotency

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Memory store defaults.
const (
	DefaultMemoryMaxEntries       = 10000
	DefaultMemoryMaxBytes   int64 = 64 << 20 // 64 MiB
)

// MemoryOptions bounds a MemoryStore. Zero or negative values take the
// defaults.
type MemoryOptions struct {
	// MaxEntries bounds records plus in-flight marks (default 10000).
	MaxEntries int
	// MaxEntriesPerGroup bounds the records plus marks of one group (one
	// workspace, through ClaimGroup) (default MaxEntries/DefaultGroupShare:
	// MaxEntries/8, rounded down; Validate refuses a default share of 0).
	MaxEntriesPerGroup int
	// MaxBytes bounds the approximate bytes of the kept records: result,
	// headers, fingerprint and id (default 64 MiB). In-flight marks are
	// counted by MaxEntries only.
	MaxBytes int64
	// MaxBytesPerGroup bounds the bytes of one group's records (default
	// MaxBytes/DefaultGroupShare, rounded down; Validate refuses a default
	// share of 0): a record that would take its group past it is not kept
	// (Record fails with ErrOverGroupShare, the mark stays until its lock
	// TTL), so one workspace cannot fill MaxBytes for the others.
	MaxBytesPerGroup int64
}

// MemoryStore is the default Store: one process, no persistence. Records are
// kept until their TTL; live records and in-flight marks are never evicted
// (evicting a record would let its key execute again). "Full" counts live
// entries only: before Claim refuses, every expired record and mark is
// dropped (an expiry heap: the earliest first, exact whatever TTLs the
// entries were given, O(log n) each). When MaxEntries or MaxBytes is then
// reached, Claim fails with ErrStoreFull; when the caller's group holds
// MaxEntriesPerGroup live entries, with a *ShareFullError (both: Do
// answers idempotency_store_unavailable, fail closed). With the default
// shares (a DefaultGroupShare-th of each total), fewer than
// DefaultGroupShare groups cannot fill the store for another. A record of
// a call already forwarded is kept even past MaxBytes (the excess is
// bounded by the calls in flight).
// Waiters wait on a per-mark channel closed by Record or Release, or on a timer
// at the mark's expiry; there is no polling. Safe for concurrent use.
type MemoryStore struct {
	maxEntries  int
	maxPerGroup int
	groups      map[string]int // live-or-unpurged entries per group
	maxBytes    int64
	maxGroupB   int64            // MaxBytesPerGroup
	groupBytes  map[string]int64 // bytes of the kept records per group

	mu     sync.Mutex
	locks  map[string]*memLock
	recs   map[string]*memRec
	exp    expiryHeap // every record and mark, earliest expiry first
	bytes  int64
	closed bool
}

type memLock struct {
	group   string // the caller's workspace, for the per-workspace bound
	token   string
	expires time.Time
	done    chan struct{} // closed when the mark ends (record, release, expiry, close)
	at      *expiryItem
}

type memRec struct {
	group   string
	id      string
	rec     *Record
	expires time.Time
	size    int64
	at      *expiryItem
}

var _ Store = (*MemoryStore)(nil)

// DefaultGroupShare is the one default share rule of every store: unless
// set, a group (workspace) may hold MaxEntries/DefaultGroupShare entries
// and MaxBytes/DefaultGroupShare bytes (rounded down). So DefaultGroupShare-1
// groups each at their share leave at least one share free, and no group
// of fewer than DefaultGroupShare workspaces can make the store refuse
// another workspace (docs/idempotency.md, "A workspace's share").
const DefaultGroupShare = 8

// Resolved is opts with every zero or negative bound replaced by its
// default (the memory and file stores share the bounds and defaults).
func (opts MemoryOptions) Resolved() MemoryOptions { return opts.withDefaults() }

func (opts MemoryOptions) withDefaults() MemoryOptions {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMemoryMaxEntries
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMemoryMaxBytes
	}
	if opts.MaxEntriesPerGroup <= 0 {
		opts.MaxEntriesPerGroup = opts.MaxEntries / DefaultGroupShare
	}
	if opts.MaxBytesPerGroup <= 0 {
		opts.MaxBytesPerGroup = opts.MaxBytes / DefaultGroupShare
	}
	return opts
}

// NewMemoryStore returns an empty MemoryStore bounded by opts.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	opts = opts.withDefaults()
	return &MemoryStore{
		maxEntries:  opts.MaxEntries,
		maxBytes:    opts.MaxBytes,
		maxPerGroup: opts.MaxEntriesPerGroup,
		maxGroupB:   opts.MaxBytesPerGroup,
		groups:      map[string]int{},
		groupBytes:  map[string]int64{},
		locks:       map[string]*memLock{},
		recs:        map[string]*memRec{},
	}
}

// SetLimits changes the store's bounds (zero or negative values take the
// defaults, as in NewMemoryStore). Entries already kept stay, even past the
// new bounds; Claim refuses new keys until the store is back under them.
// The gate calls it when a config reload keeps the store but changes its
// bounds.
func (s *MemoryStore) SetLimits(opts MemoryOptions) {
	opts = opts.withDefaults()
	s.mu.Lock()
	s.maxEntries, s.maxBytes, s.maxPerGroup = opts.MaxEntries, opts.MaxBytes, opts.MaxEntriesPerGroup
	s.maxGroupB = opts.MaxBytesPerGroup
	s.mu.Unlock()
}

// Claim implements Store: ClaimGroup with the empty group.
func (s *MemoryStore) Claim(ctx context.Context, id string, lockTTL time.Duration) (ClaimResult, error) {
	return s.ClaimGroup(ctx, id, "", lockTTL)
}

// ClaimGroup is Claim for a caller of group (the Guard passes the verified
// workspace): a group may hold at most MaxEntriesPerGroup live records and
// marks, so one workspace cannot fill the store for the others.
// Errors: ErrClosed, ErrStoreFull (the store is full of live entries),
// *ShareFullError (the group is), ctx.Err().
func (s *MemoryStore) ClaimGroup(ctx context.Context, id, group string, lockTTL time.Duration) (ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ClaimResult{}, ErrClosed
	}
	now := time.Now()
	if r, ok := s.recs[id]; ok {
		if now.Before(r.expires) {
			return ClaimResult{State: StateRecorded, Record: r.rec.clone()}, nil
		}
		s.removeRec(r)
	}
	if l, ok := s.locks[id]; ok {
		if now.Before(l.expires) {
			return ClaimResult{State: StateInFlight}, nil
		}
		s.removeLock(id, l)
	}
	full := func() bool {
		return len(s.locks)+len(s.recs) >= s.maxEntries || s.bytes >= s.maxBytes
	}
	if full() || s.groups[group] >= s.maxPerGroup {
		s.purgeExpired(now)
		// Live records are never evicted: dropping one would let its key run
		// again (a caller of one workspace could flush another's records).
		// A full store fails closed instead (idempotency_store_unavailable).
		if full() {
			return ClaimResult{}, ErrStoreFull
		}
		if s.groups[group] >= s.maxPerGroup {
			return ClaimResult{}, &ShareFullError{Entries: s.maxPerGroup}
		}
	}
	token, err := newToken()
	if err != nil {
		return ClaimResult{}, err
	}
	l := &memLock{group: group, token: token, expires: now.Add(lockTTL), done: make(chan struct{})}
	l.at = s.exp.add(id, l.expires, true)
	s.locks[id] = l
	s.groups[group]++
	return ClaimResult{State: StateClaimed, Token: token}, nil
}

// Record implements Store. Errors: ErrClosed, ErrClaimLost (token not the live
// claim), ErrRecordTooLarge (the record alone exceeds MaxBytes, or would
// take its group past MaxBytesPerGroup; the mark is kept, and the Guard
// keeps the key in flight until its lock TTL).
func (s *MemoryStore) Record(ctx context.Context, id, token string, rec Record, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	now := time.Now()
	l, ok := s.locks[id]
	if !ok || l.token != token || !now.Before(l.expires) {
		return ErrClaimLost
	}
	r := &memRec{group: l.group, id: id, rec: rec.clone(), expires: now.Add(ttl)}
	r.size = r.rec.size() + int64(len(id))
	if r.size > s.maxBytes {
		return ErrRecordTooLarge
	}
	if s.groupBytes[r.group]+r.size > s.maxGroupB {
		s.purgeExpired(now)
		if s.groupBytes[r.group]+r.size > s.maxGroupB {
			return ErrOverGroupShare
		}
	}
	s.removeLock(id, l)
	if old, ok := s.recs[id]; ok { // an expired record not yet dropped
		s.removeRec(old)
	}
	if s.bytes+r.size > s.maxBytes {
		s.purgeExpired(now)
	}
	// Kept even past MaxBytes: the call already ran, and losing its record
	// would run it again. Claim refuses new keys while the store is over.
	r.at = s.exp.add(id, r.expires, false)
	s.recs[id] = r
	s.groups[r.group]++
	s.groupBytes[r.group] += r.size
	s.bytes += r.size
	return nil
}

// Release implements Store. Errors: ErrClosed, ErrClaimLost.
func (s *MemoryStore) Release(ctx context.Context, id, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	l, ok := s.locks[id]
	if !ok || l.token != token || !time.Now().Before(l.expires) {
		return ErrClaimLost
	}
	s.removeLock(id, l)
	return nil
}

// Wait implements Store: it waits on the mark's channel, a timer at the
// mark's expiry, or ctx. Errors: ctx.Err().
func (s *MemoryStore) Wait(ctx context.Context, id string) error {
	s.mu.Lock()
	l, ok := s.locks[id]
	if !ok || s.closed {
		s.mu.Unlock()
		return ctx.Err()
	}
	done, expires := l.done, l.expires
	s.mu.Unlock()

	d := time.Until(expires)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ping implements Store; it fails only after Close (ErrClosed).
func (s *MemoryStore) Ping(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// Close drops every entry and wakes every waiter. Always returns nil.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for id, l := range s.locks {
		s.removeLock(id, l)
	}
	s.recs = map[string]*memRec{}
	s.exp = nil
	s.groupBytes = map[string]int64{}
	s.bytes = 0
	return nil
}

// Len returns the number of records and of in-flight marks held, expired ones
// not yet dropped included.
func (s *MemoryStore) Len() (records, inFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs), len(s.locks)
}

// Bytes returns the approximate bytes of the records held.
func (s *MemoryStore) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

func (s *MemoryStore) removeLock(id string, l *memLock) {
	delete(s.locks, id)
	s.exp.remove(l.at)
	s.ungroup(l.group)
	close(l.done)
}

// ungroup forgets one entry of group.
func (s *MemoryStore) ungroup(group string) {
	if s.groups[group]--; s.groups[group] <= 0 {
		delete(s.groups, group)
	}
}

func (s *MemoryStore) removeRec(r *memRec) {
	delete(s.recs, r.id)
	s.exp.remove(r.at)
	s.ungroup(r.group)
	if s.groupBytes[r.group] -= r.size; s.groupBytes[r.group] <= 0 {
		delete(s.groupBytes, r.group)
	}
	s.bytes -= r.size
}

// purgeExpired drops every expired record and mark, earliest expiry first
// (the expiry heap: O(expired × log n), exact whatever TTL each entry was
// given, a reload may change it). Called before any refusal for fullness,
// so "full" always means full of live entries.
func (s *MemoryStore) purgeExpired(now time.Time) {
	for len(s.exp) > 0 && !now.Before(s.exp[0].expires) {
		it := s.exp[0]
		if it.mark {
			s.removeLock(it.id, s.locks[it.id])
		} else {
			s.removeRec(s.recs[it.id])
		}
	}
}

// expiryItem is one record or mark in an expiryHeap.
type expiryItem struct {
	id      string
	expires time.Time
	mark    bool
	index   int // in the heap; -1 once removed
}

// expiryHeap is a min-heap of entries by expiry (container/heap).
type expiryHeap []*expiryItem

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) { it := x.(*expiryItem); it.index = len(*h); *h = append(*h, it) }
func (h *expiryHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.index = -1
	return it
}

// add puts an entry in the heap and returns its item.
func (h *expiryHeap) add(id string, expires time.Time, mark bool) *expiryItem {
	it := &expiryItem{id: id, expires: expires, mark: mark}
	heap.Push(h, it)
	return it
}

// remove takes it out of the heap, if it is still there.
func (h *expiryHeap) remove(it *expiryItem) {
	if it != nil && it.index >= 0 && it.index < len(*h) && (*h)[it.index] == it {
		heap.Remove(h, it.index)
	}
}
