// The buffers of Scan for documents with many keys, kept between scans.

package strictjson

import "sync"

// scratch holds the buffers a scan takes once a document outgrows the
// stack (more keys open than keyBuf holds, or an object with a table): the
// keys, the unescaped keys and the key tables. A scan takes one from its
// pool at that point and gives it back when it ends, so that bodies of
// many keys, one after the other, reuse the same memory instead of
// allocating and clearing it again each time (and making the collector
// run). A buffer over keepScratch bytes is not kept: what the pools hold
// is bounded (keepScratch a buffer, a few buffers a scratch, one scratch
// per P and the pool's victim cache), and a body of millions of keys
// allocates as it did.
type scratch[O offset] struct {
	keys      []keyRef[O]
	unescaped []byte
	tables    keyTables[O]
}

// keepScratch bounds each buffer a pool keeps (bytes): 1 MiB holds the
// table of an object of 96 Ki keys.
const keepScratch = 1 << 20

var (
	scratch32 = sync.Pool{New: func() any { return new(scratch[uint32]) }}
	scratch64 = sync.Pool{New: func() any { return new(scratch[uint64]) }}
)

// takeScratch takes a scratch from pool and moves the scan's unescaped keys
// into it; the scan's tables, empty until then, become its.
func takeScratch[O offset](pool *sync.Pool, unescaped *[]byte, tables *keyTables[O]) *scratch[O] {
	sc := pool.Get().(*scratch[O])
	*unescaped = append(sc.unescaped[:0], *unescaped...)
	*tables = keyTables[O]{slots: sc.tables.slots[:0], held: sc.tables.held[:0], old: sc.tables.old[:0], fold: sc.tables.fold[:0], cmp: sc.tables.cmp[:0], work: tables.work}
	return sc
}

// keep gives sc back to pool with the scan's last buffers (sc.keys already
// is), those within keepScratch.
func (sc *scratch[O]) keep(pool *sync.Pool, unescaped []byte, tables *keyTables[O]) {
	sc.keys = keepable(sc.keys, 8)
	sc.unescaped = keepable(unescaped, 1)
	sc.tables = keyTables[O]{
		slots: keepable(tables.slots, 8),
		held:  keepable(tables.held, 8),
		old:   keepable(tables.old, 8),
		fold:  keepable(tables.fold, 1),
		cmp:   keepable(tables.cmp, 1),
	}
	pool.Put(sc)
}

// keepable returns s emptied, or nil when its capacity is over keepScratch
// bytes (size bytes an element, at least).
func keepable[T any](s []T, size int) []T {
	if cap(s)*size > keepScratch {
		return nil
	}
	return s[:0]
}
