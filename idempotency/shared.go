// A store shared by the guards of several configurations, and kept open
// while a guard call still runs on it (docs/idempotency.md, "The stores,
// and what each survives").

package idempotency

import (
	"context"
	"sync"
	"time"
)

// Shared is one store shared by the guards whose settings have its
// identity: a reload builds the new guards before it drops the old ones,
// and both use one store (a file store's lock would refuse a second open; a
// second memory store would not see the in-flight marks). It is closed only
// when no owner holds it any more AND the guard calls running on it have
// ended, so a reload in the middle of a forward neither loses its record
// nor closes the Redis client under it. Guard.Do marks its call on a Shared
// store itself.
type Shared struct {
	Store
	identity string
	owners   int // guarded by sharedMu
	inflight int // guarded by sharedMu
}

// shared is every Shared store not yet closed, live or draining, by
// identity: an owner that arrives while an older store of the same
// identity still drains takes that store over instead of opening a second
// one.
var (
	sharedMu sync.Mutex
	shared   = map[string]*Shared{}
)

// Acquire returns the shared store of identity, one more owner of it,
// opening it with open if no live or draining store has that identity.
// Every successful call must be paired with one Leave.
func Acquire(identity string, open func() (Store, error)) (*Shared, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s, ok := shared[identity]; ok {
		s.owners++
		return s, nil
	}
	st, err := open()
	if err != nil {
		return nil, err
	}
	s := &Shared{Store: st, identity: identity, owners: 1}
	shared[identity] = s
	return s, nil
}

// Leave gives back one owner's hold. The store closes now if no guard
// call runs on it, else when the last one ends.
func (s *Shared) Leave() error {
	sharedMu.Lock()
	s.owners--
	closeNow := s.leaveIfIdle()
	sharedMu.Unlock()
	if closeNow {
		return s.Store.Close()
	}
	return nil
}

// Begin marks one guard call (claim to record or release) in progress on
// the store; done ends it and closes a store that was waiting for it.
func (s *Shared) Begin() (done func()) {
	sharedMu.Lock()
	s.inflight++
	sharedMu.Unlock()
	return func() {
		sharedMu.Lock()
		s.inflight--
		closeNow := s.leaveIfIdle()
		sharedMu.Unlock()
		if closeNow {
			_ = s.Store.Close()
		}
	}
}

// leaveIfIdle (under sharedMu) takes the store out of the registry if it
// is unowned and idle, and reports whether it did: the caller then closes
// it.
func (s *Shared) leaveIfIdle() bool {
	if s.owners > 0 || s.inflight > 0 || shared[s.identity] != s {
		return false
	}
	delete(shared, s.identity)
	return true
}

// ClaimGroup passes the caller's workspace to the store when it bounds
// workspaces (GroupClaimer); the embedded Store alone would hide the
// method from the Guard, and every workspace would share one group.
func (s *Shared) ClaimGroup(ctx context.Context, id, group string, lockTTL time.Duration) (ClaimResult, error) {
	if gc, ok := s.Store.(GroupClaimer); ok {
		return gc.ClaimGroup(ctx, id, group, lockTTL)
	}
	return s.Store.Claim(ctx, id, lockTTL)
}

// Close is a no-op: an owner never closes a shared store itself (Leave);
// the Store interface needs the method.
func (s *Shared) Close() error { return nil }

// SetLimits gives the store new bounds when it takes them (the memory, file
// and Redis stores): a reload that changes max_entries or
// max_bytes_per_workspace keeps the records.
func (s *Shared) SetLimits(o MemoryOptions) {
	if ls, ok := s.Store.(interface{ SetLimits(MemoryOptions) }); ok {
		ls.SetLimits(o)
	}
}

var (
	_ GroupClaimer                          = (*Shared)(nil)
	_ interface{ SetLimits(MemoryOptions) } = (*MemoryStore)(nil)
	_ interface{ SetLimits(MemoryOptions) } = (*FileStore)(nil)
	_ interface{ SetLimits(MemoryOptions) } = (*RedisStore)(nil)
)
