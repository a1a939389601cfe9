package idempotency

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// File store defaults: the bounds are MemoryStore's (memory.go).
const (
	DefaultFileMaxEntries        = DefaultMemoryMaxEntries
	DefaultFileMaxBytes    int64 = DefaultMemoryMaxBytes
	DefaultFileOpenTimeout       = time.Second
)

// FileOptions configures a FileStore. Path is required; zero or negative
// values of the other fields take the defaults.
type FileOptions struct {
	// Path of the database file, e.g. "/var/lib/supervaizer/idempotency.db".
	// Required. The parent directory is created (mode 0700) if missing, the
	// file (mode 0600) if absent; an existing file must be a FileStore
	// database (see FileStore).
	Path string
	// MaxEntries bounds records plus in-flight marks (default 10000).
	MaxEntries int
	// MaxEntriesPerGroup bounds the records plus marks of one group (one
	// workspace, through ClaimGroup), as MemoryOptions.MaxEntriesPerGroup
	// (default MaxEntries/8).
	MaxEntriesPerGroup int
	// MaxBytes bounds the approximate bytes of the kept records: result,
	// headers, fingerprint and id, as MemoryOptions.MaxBytes counts them
	// (default 64 MiB). In-flight marks are counted by MaxEntries only. The
	// file itself is larger (bbolt pages) and never shrinks: it keeps the
	// size of its high-water mark.
	MaxBytes int64
	// MaxBytesPerGroup bounds the bytes of one group's records, as
	// MemoryOptions.MaxBytesPerGroup (default MaxBytes/8).
	MaxBytesPerGroup int64
	// OpenTimeout bounds the wait for the file's lock (flock) when another
	// process holds it (default 1 s); NewFileStore then fails.
	OpenTimeout time.Duration
}

// FileStore is a durable Store for one process: an embedded bbolt database
// (go.etcd.io/bbolt) in one file, so records and in-flight marks survive a
// restart of the process. It has MemoryStore's semantics (memory.go): records
// are kept until their TTL; live records and live in-flight marks are never
// evicted (evicting a record would let its key execute again); when
// MaxEntries or MaxBytes is reached and no expired entry can be dropped,
// Claim fails with ErrStoreFull, when the caller's group holds
// MaxEntriesPerGroup live entries with a *ShareFullError (Do answers
// idempotency_store_unavailable, fail closed); a record of a call already
// forwarded is kept even past MaxBytes.
//
// Persistence. A mark is stored with its absolute expiry (unix milliseconds,
// wall clock), so a mark taken before a crash still reads StateInFlight
// after the restart until its lock TTL ends, and a record answers until its
// TTL (store.go: "an expired mark counts as absent"); an entry lives at
// least its TTL and at most about 2 ms more (expiresAt). A jump of the wall
// clock shortens or lengthens both. Each Claim that takes a mark, each Record
// and each Release is one bbolt read-write transaction, fsync'd at commit
// (bbolt's default): one disk flush per call, about 2 ms on a local SSD
// (BenchmarkFileClaimRecord: 4.4 ms for a Claim plus a Record), more on
// network disks. Writes are serialized (one mutex and bbolt's single
// writer), so they are bounded by the disk's flush rate. Claims that find a
// record or a live mark are read-only transactions (no flush). The mark's
// token is stored too, so fencing holds across a restart.
//
// One process per file: bbolt locks the file (flock) while it is open, and
// NewFileStore fails after OpenTimeout if another process (or another
// FileStore in this process) holds it. Several replicas cannot share a file
// store: use RedisStore for them.
//
// Layout (version 1; a file of another layout or version is refused, never
// wiped): bucket "meta" holds "version" = "1"; bucket "recs" maps id to the
// JSON of a record (fingerprint, status, headers, result, expiry, group,
// size); bucket "marks" maps id to the JSON of a mark (token, expiry, group);
// bucket "expiry" indexes both by expiry (8-byte big-endian unix ms, then 'r'
// or 'm', then id), so expired entries are found oldest first.
//
// Counts (entries, bytes, entries per group) are kept in memory and
// recomputed when the file is opened, by one scan that also drops the
// expired entries: opening costs O(entries held), normally at most
// MaxEntries. Expired entries are also dropped lazily (a Claim or Record on
// their id) and by a bounded sweep at the start of every write transaction
// (at most 32 oldest expired entries; when the store or the caller's group
// would be refused, every expired entry, in batches of 1024: sweepWhile).
// There is no background goroutine.
//
// Wait is an in-process notification per id (a channel closed when the mark
// ends through this store: Record, Release, expiry sweep, Close) plus a timer
// at the mark's expiry; no polling. Safe for concurrent use.
type FileStore struct {
	path        string
	maxEntries  int
	maxPerGroup int
	maxBytes    int64
	maxGroupB   int64 // MaxBytesPerGroup

	mu      sync.Mutex
	db      *bolt.DB
	closed  bool
	recs    int            // records held (live or not yet dropped)
	marks   int            // in-flight marks held (live or not yet dropped)
	bytes   int64          // sum of the records' sizes
	groups  map[string]int // records plus marks per group
	waiters map[string]*fileWaiters
	// groupBytes is the sum of the records' sizes per group.
	groupBytes map[string]int64
}

// fileWaiters are the Wait calls on one id; ch is closed when its mark ends.
type fileWaiters struct {
	ch chan struct{}
	n  int
}

var (
	_ Store        = (*FileStore)(nil)
	_ GroupClaimer = (*FileStore)(nil)
)

// NewFileStore opens (or creates) the database at opts.Path and returns a
// store over it, bounded by opts. Errors (each names the path): an empty
// Path; the parent directory or the file cannot be created or opened; the
// file is locked by another process for longer than OpenTimeout; the file is
// not a bbolt database, or is one of another layout or layout version (the
// file is left as it is); an entry of the file cannot be decoded.
func NewFileStore(opts FileOptions) (*FileStore, error) {
	if opts.Path == "" {
		return nil, errors.New("idempotency: file store: empty path")
	}
	l := MemoryOptions{MaxEntries: opts.MaxEntries, MaxEntriesPerGroup: opts.MaxEntriesPerGroup, MaxBytes: opts.MaxBytes,
		MaxBytesPerGroup: opts.MaxBytesPerGroup}.withDefaults()
	opts.MaxEntries, opts.MaxEntriesPerGroup, opts.MaxBytes = l.MaxEntries, l.MaxEntriesPerGroup, l.MaxBytes
	opts.MaxBytesPerGroup = l.MaxBytesPerGroup
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = DefaultFileOpenTimeout
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("idempotency: file store %s: create its directory: %w", opts.Path, err)
	}
	bo := *bolt.DefaultOptions
	bo.Timeout = opts.OpenTimeout
	db, err := bolt.Open(opts.Path, 0o600, &bo)
	if err != nil {
		return nil, openError(opts.Path, opts.OpenTimeout, err)
	}
	s := &FileStore{
		path:        opts.Path,
		maxEntries:  opts.MaxEntries,
		maxPerGroup: opts.MaxEntriesPerGroup,
		maxBytes:    opts.MaxBytes,
		maxGroupB:   opts.MaxBytesPerGroup,
		db:          db,
		groups:      map[string]int{},
		groupBytes:  map[string]int64{},
		waiters:     map[string]*fileWaiters{},
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// SetLimits changes the store's bounds (the MemoryOptions fields; zero or
// negative values take the defaults). Entries already kept stay, even past
// the new bounds; Claim refuses new keys until the store is back under
// them. The gate calls it when a config reload keeps the store (same path)
// but changes its bounds.
func (s *FileStore) SetLimits(opts MemoryOptions) {
	opts = opts.withDefaults() // the file store's defaults are the memory store's
	s.mu.Lock()
	s.maxEntries, s.maxBytes, s.maxPerGroup = opts.MaxEntries, opts.MaxBytes, opts.MaxEntriesPerGroup
	s.maxGroupB = opts.MaxBytesPerGroup
	s.mu.Unlock()
}

// openError explains a failed bolt.Open.
func openError(path string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, bolt.ErrTimeout):
		return fmt.Errorf("idempotency: file store %s: the file is locked by another process "+
			"(or by another open FileStore of this process), still locked after %s: "+
			"a file store serves one process only; replicas must share a Redis store: %w",
			path, timeout, err)
	case errors.Is(err, bolt.ErrInvalid), errors.Is(err, bolt.ErrVersionMismatch), errors.Is(err, bolt.ErrChecksum):
		return fmt.Errorf("idempotency: file store %s: the file is not a bbolt database or is corrupt; "+
			"refusing to use it (it is left as it is: move it away or choose another path): %w", path, err)
	}
	return fmt.Errorf("idempotency: file store %s: open: %w", path, err)
}

// Claim implements Store: ClaimGroup with the empty group.
func (s *FileStore) Claim(ctx context.Context, id string, lockTTL time.Duration) (ClaimResult, error) {
	return s.ClaimGroup(ctx, id, "", lockTTL)
}

// ClaimGroup is Claim for a caller of group (the Guard passes the verified
// workspace, guard.go GroupClaimer): a group may hold at most
// MaxEntriesPerGroup live records and marks. A live record or mark is read
// in a read-only transaction; a new mark is written (and fsync'd) in one
// read-write transaction that also drops expired entries (all of them, if
// the store or the group would otherwise be refused: sweepWhile). Errors:
// ErrClosed, ErrStoreFull (the store is full of live entries),
// *ShareFullError (the group is), ctx.Err(), a wrapped bbolt or decoding
// error (the store is unavailable).
func (s *FileStore) ClaimGroup(ctx context.Context, id, group string, lockTTL time.Duration) (ClaimResult, error) {
	if err := s.enter(ctx); err != nil {
		return ClaimResult{}, err
	}
	defer s.mu.Unlock()
	now := time.Now().UnixMilli()
	if res, done, err := s.peek(id, now); err != nil || done {
		return res, s.ioError(err)
	}
	token, err := newToken()
	if err != nil {
		return ClaimResult{}, err
	}
	err = s.update(now, func(t *fileTx) error {
		if err := t.dropExpiredID(id); err != nil {
			return err
		}
		if err := t.sweep(sweepBatch); err != nil {
			return err
		}
		// Live entries are never evicted (memory.go, ClaimGroup): only
		// expired ones are dropped; a full store or group fails closed.
		if err := t.sweepWhile(func() bool { return t.full() || t.groupFull(group) }); err != nil {
			return err
		}
		if t.full() {
			return t.refuseFull(ErrStoreFull)
		}
		if t.groupFull(group) {
			return t.refuseFull(&ShareFullError{Entries: s.maxPerGroup})
		}
		return t.putMark(id, fileMark{Token: token, Expires: expiresAt(now, lockTTL), Group: group})
	})
	if err != nil {
		return ClaimResult{}, s.ioError(err)
	}
	return ClaimResult{State: StateClaimed, Token: token}, nil
}

// peek answers Claim from a read-only transaction when id holds a live
// record (a decoded copy) or a live mark; done is false otherwise.
func (s *FileStore) peek(id string, now int64) (res ClaimResult, done bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		t := s.bind(tx, now)
		if r, ok, err := t.getRec(id); err != nil || (ok && r.live(now)) {
			if err == nil {
				res, done = ClaimResult{State: StateRecorded, Record: r.record()}, true
			}
			return err
		}
		m, ok, err := t.getMark(id)
		if err == nil && ok && m.live(now) {
			res, done = ClaimResult{State: StateInFlight}, true
		}
		return err
	})
	return res, done, err
}

// Record implements Store, with MemoryStore's rules (memory.go, Record): the
// record replaces the mark in one fsync'd transaction, is kept even past
// MaxBytes, and the waiters of id are woken after the commit. Errors:
// ErrClosed, ErrClaimLost (token not the live claim; nothing written),
// ErrRecordTooLarge (the record alone exceeds MaxBytes, or ErrOverGroupShare:
// it would take its group past MaxBytesPerGroup; the mark is kept, and the
// Guard keeps the key in flight until its lock TTL), ctx.Err(), a wrapped
// bbolt error.
func (s *FileStore) Record(ctx context.Context, id, token string, rec Record, ttl time.Duration) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := time.Now().UnixMilli()
	r := newFileRec(&rec, id, expiresAt(now, ttl))
	err := s.update(now, func(t *fileTx) error {
		m, err := t.liveMark(id, token)
		if err != nil {
			return err
		}
		if r.Size > s.maxBytes {
			return ErrRecordTooLarge
		}
		r.Group = m.Group
		if err := t.delMark(id, m); err != nil {
			return err
		}
		if err := t.dropRec(id); err != nil { // an expired record not yet dropped
			return err
		}
		if err := t.sweep(sweepBatch); err != nil {
			return err
		}
		overGroup := func() bool { return t.groupBytes(r.Group)+r.Size > s.maxGroupB }
		if err := t.sweepWhile(func() bool { return overGroup() || s.bytes+t.dBytes+r.Size > s.maxBytes }); err != nil {
			return err
		}
		if overGroup() {
			return ErrOverGroupShare // rolled back: the mark stays
		}
		// Kept even past MaxBytes: the call already ran, and losing its
		// record would run it again. Claim refuses new keys meanwhile.
		return t.putRec(id, r)
	})
	return s.ioError(err)
}

// Release implements Store: the mark is removed in one fsync'd transaction
// and the waiters of id are woken. Errors: ErrClosed, ErrClaimLost, ctx.Err(),
// a wrapped bbolt error.
func (s *FileStore) Release(ctx context.Context, id, token string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := time.Now().UnixMilli()
	err := s.update(now, func(t *fileTx) error {
		m, err := t.liveMark(id, token)
		if err != nil {
			return err
		}
		if err := t.delMark(id, m); err != nil {
			return err
		}
		return t.sweep(sweepBatch)
	})
	return s.ioError(err)
}

// Wait implements Store: it waits on the id's notification channel (closed
// after a Record, a Release, a sweep of the expired mark or Close), a timer at
// the mark's expiry, or ctx. It returns nil at once if id has no live mark.
// Errors: ctx.Err(), ErrClosed (called after Close), a wrapped bbolt error.
func (s *FileStore) Wait(ctx context.Context, id string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	now := time.Now().UnixMilli()
	var m fileMark
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		m, ok, err = s.bind(tx, now).getMark(id)
		return err
	})
	if err != nil || !ok || !m.live(now) {
		s.mu.Unlock()
		if err != nil {
			return s.ioError(err)
		}
		return ctx.Err()
	}
	w := s.waiters[id]
	if w == nil {
		w = &fileWaiters{ch: make(chan struct{})}
		s.waiters[id] = w
	}
	w.n++
	s.mu.Unlock()
	defer s.leave(id, w)

	timer := time.NewTimer(time.Until(time.UnixMilli(m.Expires)))
	defer timer.Stop()
	select {
	case <-w.ch:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave ends one Wait on id; the last one forgets the channel.
func (s *FileStore) leave(id string, w *fileWaiters) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.n--; w.n == 0 && s.waiters[id] == w {
		delete(s.waiters, id)
	}
}

// wake ends the waits on id (its mark ended). Called with s.mu held.
func (s *FileStore) wake(id string) {
	if w := s.waiters[id]; w != nil {
		close(w.ch)
		delete(s.waiters, id)
	}
}

// enter takes the store's lock for one call: it fails with ctx.Err() or
// ErrClosed (and then does not hold the lock); on success the caller
// unlocks s.mu.
func (s *FileStore) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// Ping implements Store: a read-only transaction that reads the layout
// version. Errors: ErrClosed, a wrapped bbolt error.
func (s *FileStore) Ping(ctx context.Context) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	return s.ioError(s.db.View(checkVersion))
}

// Close wakes every waiter and closes the file (releasing its lock); the
// entries stay in the file for the next NewFileStore. Later calls of the
// store's methods return ErrClosed (so a forward still in flight cannot
// record: its mark stays in the file until its lock TTL); a second Close
// returns nil. Errors: the wrapped bbolt error of closing the file.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for id := range s.waiters {
		s.wake(id)
	}
	return s.ioError(s.db.Close())
}

// Len returns the number of records and of in-flight marks held, expired ones
// not yet dropped included.
func (s *FileStore) Len() (records, inFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recs, s.marks
}

// Bytes returns the approximate bytes of the records held (see
// FileOptions.MaxBytes).
func (s *FileStore) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// ioError names the file in a bbolt or decoding error; the store's sentinel
// errors and ctx errors pass unchanged.
func (s *FileStore) ioError(err error) error {
	switch {
	case err == nil, errors.Is(err, ErrClaimLost), errors.Is(err, ErrRecordTooLarge),
		errors.Is(err, ErrStoreFull), errors.Is(err, ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return fmt.Errorf("idempotency: file store %s: %w", s.path, err)
}

// expiresAt is the expiry (unix ms) of an entry written at now (unix ms,
// truncated) for ttl: never earlier than ttl after the call began, at most
// about 2 ms later (millisecond resolution, rounded up). A ttl under 1 ms
// counts as 1 ms, as the Redis store's PX values (redis.go millis).
func expiresAt(now int64, ttl time.Duration) int64 {
	ms := max(1, (ttl+time.Millisecond-1)/time.Millisecond)
	return now + int64(ms) + 1
}
