package idempotency

import (
	"container/list"
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
	// workspace, through ClaimGroup) (default MaxEntries/2, at least 1).
	MaxEntriesPerGroup int
	// MaxBytes bounds the approximate bytes of the kept records: result,
	// headers, fingerprint and id (default 64 MiB). In-flight marks are
	// counted by MaxEntries only.
	MaxBytes int64
	// MaxBytesPerGroup bounds the bytes of one group's records (default
	// MaxBytes/8, at least 1): a record that would take its group past it
	// is not kept (Record fails with ErrRecordTooLarge, the mark stays until
	// its lock TTL), so one workspace cannot fill MaxBytes for the others.
	MaxBytesPerGroup int64
}

// MemoryStore is the default Store: one process, no persistence. Records are
// kept until their TTL; live records and in-flight marks are never evicted
// (evicting a record would let its key execute again). When MaxEntries or
// MaxBytes is reached and no expired entry can be dropped, Claim fails with
// ErrStoreFull (Do answers idempotency_store_unavailable, fail closed); a
// record of a call already forwarded is kept even past MaxBytes (the excess
// is bounded by the calls in flight). Expired entries are dropped lazily.
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
	recs   map[string]*list.Element // of *memRec
	order  *list.List               // records, oldest first
	bytes  int64
	closed bool
}

type memLock struct {
	group   string // the caller's workspace, for the per-workspace bound
	token   string
	expires time.Time
	done    chan struct{} // closed when the mark ends (record, release, expiry, close)
}

type memRec struct {
	group   string
	id      string
	rec     *Record
	expires time.Time
	size    int64
}

var _ Store = (*MemoryStore)(nil)

// DefaultGroupBytesShare is the default share of MaxBytes one group may
// hold: MaxBytesPerGroup defaults to MaxBytes / DefaultGroupBytesShare.
const DefaultGroupBytesShare = 8

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
		opts.MaxEntriesPerGroup = max(1, opts.MaxEntries/2)
	}
	if opts.MaxBytesPerGroup <= 0 {
		opts.MaxBytesPerGroup = max(1, opts.MaxBytes/DefaultGroupBytesShare)
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
		recs:        map[string]*list.Element{},
		order:       list.New(),
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
// workspace): a group may hold at most MaxEntriesPerGroup records and marks,
// so one workspace cannot fill the store for the others.
// Errors: ErrClosed, ErrStoreFull (the store or the group is full of live
// entries), ctx.Err().
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
	if el, ok := s.recs[id]; ok {
		r := el.Value.(*memRec)
		if now.Before(r.expires) {
			return ClaimResult{State: StateRecorded, Record: r.rec.clone()}, nil
		}
		s.removeRec(el)
	}
	if l, ok := s.locks[id]; ok {
		if now.Before(l.expires) {
			return ClaimResult{State: StateInFlight}, nil
		}
		s.removeLock(id, l)
	}
	full := func() bool {
		return len(s.locks)+len(s.recs) >= s.maxEntries || s.bytes >= s.maxBytes || s.groups[group] >= s.maxPerGroup
	}
	if full() {
		s.purgeExpired(now)
		// Live records are never evicted: dropping one would let its key run
		// again (a caller of one workspace could flush another's records).
		// A full store fails closed instead (idempotency_store_unavailable).
		if full() {
			return ClaimResult{}, ErrStoreFull
		}
	}
	token, err := newToken()
	if err != nil {
		return ClaimResult{}, err
	}
	s.locks[id] = &memLock{group: group, token: token, expires: now.Add(lockTTL), done: make(chan struct{})}
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
	if el, ok := s.recs[id]; ok { // an expired record not yet dropped
		s.removeRec(el)
	}
	if s.bytes+r.size > s.maxBytes {
		s.purgeExpired(now)
	}
	// Kept even past MaxBytes: the call already ran, and losing its record
	// would run it again. Claim refuses new keys while the store is over.
	s.recs[id] = s.order.PushBack(r)
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
	s.recs = map[string]*list.Element{}
	s.order.Init()
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
	s.ungroup(l.group)
	close(l.done)
}

// ungroup forgets one entry of group.
func (s *MemoryStore) ungroup(group string) {
	if s.groups[group]--; s.groups[group] <= 0 {
		delete(s.groups, group)
	}
}

func (s *MemoryStore) removeRec(el *list.Element) {
	r := el.Value.(*memRec)
	s.order.Remove(el)
	delete(s.recs, r.id)
	s.ungroup(r.group)
	if s.groupBytes[r.group] -= r.size; s.groupBytes[r.group] <= 0 {
		delete(s.groupBytes, r.group)
	}
	s.bytes -= r.size
}

// purgeExpired drops expired records from the oldest end, stopping at the
// first live one (records are kept in insertion order and share the
// Guard's TTL, so that is expiry order: O(expired), not O(n)), then the
// expired in-flight marks (bounded by the calls in flight). Only when full.
func (s *MemoryStore) purgeExpired(now time.Time) {
	for el := s.order.Front(); el != nil && !now.Before(el.Value.(*memRec).expires); el = s.order.Front() {
		s.removeRec(el)
	}
	for id, l := range s.locks {
		if !now.Before(l.expires) {
			s.removeLock(id, l)
		}
	}
}
