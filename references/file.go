package references

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// FileStore is the memory store written through to an embedded bbolt
// database file, so that the bindings survive a restart of the process:
// read back at open (at most Limits.MaxEntries, the most recently used:
// the rest is deleted from the file), every change of a call (a binding made, renewed or
// dropped) committed (fsync'd) before the call goes on. One process per
// file (bbolt locks it).
type FileStore struct {
	*MemoryStore
	db *bolt.DB
}

var (
	bucketBindings = []byte("bindings")
	bucketMeta     = []byte("meta")
	metaLayout     = []byte("layout")
	layoutV1       = []byte("references/1")
)

// NewFileStore opens (or creates) the database at path and reads its
// bindings back. Errors: the directory or file cannot be made or locked
// (1 s), the file is not a references database.
func NewFileStore(path string, l Limits) (*FileStore, error) {
	if path == "" {
		return nil, errors.New("references store file needs a path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &FileStore{MemoryStore: NewMemoryStore(l), db: db}
	// Read back at most MaxEntries live bindings, the most recently used
	// (a file written under larger bounds, or by an older version, never
	// costs more memory than the bounds in effect): a min-heap by last use
	// of that size, the workspace names shared.
	lim, now := s.lim, s.now()
	items := &loadHeap{}
	names := map[string]string{}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		switch v := meta.Get(metaLayout); {
		case v == nil:
			if tx.Bucket(bucketBindings) != nil {
				return errors.New("not a references database (no layout mark)")
			}
			if err := meta.Put(metaLayout, layoutV1); err != nil {
				return err
			}
		case string(v) != string(layoutV1):
			return fmt.Errorf("not a references database of this version (layout %q)", v)
		}
		b, err := tx.CreateBucketIfNotExists(bucketBindings)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			if len(k) != len(key{}) || len(v) < 8 {
				return fmt.Errorf("a binding of %d/%d bytes: not a references database", len(k), len(v))
			}
			lastUse := time.Unix(0, int64(binary.BigEndian.Uint64(v)))
			if !now.Before(lastUse.Add(lim.TTL)) {
				return nil // expired: pruned below
			}
			if items.Len() >= lim.MaxEntries {
				if !(*items)[0].lastUse.Before(lastUse) {
					return nil // older than every one kept: pruned below
				}
				heap.Pop(items)
			}
			var it loaded
			copy(it.k[:], k)
			it.lastUse = lastUse
			ws, ok := names[string(v[8:])]
			if !ok {
				ws = string(v[8:])
				names[ws] = ws
			}
			it.workspace = ws
			heap.Push(items, it)
			return nil
		})
	})
	if err == nil {
		s.mu.Lock()
		s.load(*items)
		s.mu.Unlock()
		err = s.prune()
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// pruneBatch is the most keys one prune transaction deletes.
const pruneBatch = 10_000

// prune deletes from the file every binding the memory store does not
// hold (expired, or beyond the bounds at open), in transactions of at
// most pruneBatch keys, so that its memory stays bounded too.
func (s *FileStore) prune() error {
	var from []byte
	for {
		var del [][]byte
		err := s.db.View(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketBindings).Cursor()
			k, _ := c.First()
			if from != nil {
				k, _ = c.Seek(from)
			}
			for ; k != nil && len(del) < pruneBatch; k, _ = c.Next() {
				var kk key
				copy(kk[:], k)
				if s.m[kk] == nil {
					del = append(del, kk[:])
				}
			}
			return nil
		})
		if err != nil || len(del) == 0 {
			return err
		}
		if err := s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketBindings)
			for _, k := range del {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		if len(del) < pruneBatch {
			return nil
		}
		from = del[len(del)-1] // deleted: the next key after it
	}
}

// loadHeap is the bindings read back, least recently used first.
type loadHeap []loaded

func (h loadHeap) Len() int           { return len(h) }
func (h loadHeap) Less(i, j int) bool { return h[i].lastUse.Before(h[j].lastUse) }
func (h loadHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *loadHeap) Push(x any)        { *h = append(*h, x.(loaded)) }
func (h *loadHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// Resolve implements Store: the memory store's decision, its changes
// written through.
func (s *FileStore) Resolve(_ context.Context, agent, workspace string, refs []Ref, bindUnknown bool) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := &journal{}
	s.journal = j
	res, err := s.resolveLocked(agent, workspace, refs, bindUnknown)
	s.journal = nil
	if werr := s.write(j); werr != nil && err == nil {
		// The bindings made are the caller's; the call is refused (fail
		// closed) as they may not survive a restart.
		return Result{}, werr
	}
	return res, err
}

// Learn implements Store, its changes written through.
func (s *FileStore) Learn(_ context.Context, agent, workspace string, refs []Ref) (Learned, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := &journal{}
	s.journal = j
	l, err := s.learnLocked(agent, workspace, refs)
	s.journal = nil
	if werr := s.write(j); werr != nil && err == nil {
		return l, werr
	}
	return l, err
}

// write commits j in one transaction (nothing when j is empty).
func (s *FileStore) write(j *journal) error {
	if len(j.put) == 0 && len(j.del) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketBindings)
		for _, k := range j.del {
			if err := b.Delete(k[:]); err != nil {
				return err
			}
		}
		for _, e := range j.put {
			if s.m[e.k] != e { // dropped later in the same call
				continue
			}
			v := make([]byte, 8+len(e.owner.name))
			binary.BigEndian.PutUint64(v, uint64(e.lastUse.UnixNano()))
			copy(v[8:], e.owner.name)
			if err := b.Put(e.k[:], v); err != nil {
				return err
			}
		}
		return nil
	})
}

// Ping reports whether the database is open.
func (s *FileStore) Ping(context.Context) error {
	return s.db.View(func(*bolt.Tx) error { return nil })
}

// Close closes the database.
func (s *FileStore) Close() error { return s.db.Close() }
