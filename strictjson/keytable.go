// The keys Scan keeps while an object is open, and the tables that index
// them once an object has many.

package strictjson

import (
	"bytes"
	"hash/maphash"
	"math"
)

// offset is the type of the offsets and key indexes Scan keeps: uint32 for
// a document of at most wideAbove bytes (a key then costs 8 bytes, a table
// slot 4), uint64 past it. Scan is one generic function instantiated for
// both, so that a longer document is scanned exactly as a short one, at
// twice the cost a key; none is truncated.
type offset interface{ ~uint32 | ~uint64 }

// wideAbove is the length past which Scan keeps uint64 offsets. Up to
// math.MaxInt32 bytes an offset into the document, or into the unescaped
// keys (never longer than the document), fits in 31 bits, which leaves the
// top bit of keyRef.start for the unescaped flag. A variable so that tests
// can send every document through the wide instantiation.
var wideAbove = math.MaxInt32

// keyRef is one object key seen so far: b[start:end], its raw bytes between
// the quotes, or, when it held an escape, unescaped[start&^unescapedBit:end]
// (see Scan). It holds no pointer, so that keeping keys costs no write
// barrier, and it is two offsets: 8 bytes a key in the uint32 form.
type keyRef[O offset] struct{ start, end O }

// unescapedBit is the top bit of O: set in keyRef.start when the key is in
// the unescaped keys.
func unescapedBit[O offset]() O { return ^O(0)>>1 + 1 }

// bytes returns the key's bytes: in b, or in unescaped.
func (k keyRef[O]) bytes(b, unescaped []byte) []byte {
	if bit := unescapedBit[O](); k.start&bit != 0 {
		return unescaped[k.start&^bit : k.end]
	}
	return b[k.start:k.end]
}

// manyKeys is the key count past which an object's keys are indexed in a
// table (keyTables) rather than compared one by one.
const manyKeys = 32

// keySeed seeds the hashes of the key tables: random per process, so that
// no document can be made to collide.
var keySeed = maphash.MakeSeed()

// hashMask is and-ed to every key hash. Tests set it to 0, so that every key
// collides with every other (the tables must still tell them apart).
var hashMask = ^uint64(0)

// keyHash is the hash of key in the key tables.
func keyHash(key []byte) uint64 { return maphash.Bytes(keySeed, key) & hashMask }

// keyTables holds the key tables of the open objects with more than manyKeys
// keys. A table is open addressing over 1 + a key's index in Scan's keys (0:
// an empty slot), of a power-of-two size at least 4/3 of the count of its
// object's keys, probed linearly from the key's hash; it holds no key bytes,
// so a slot is taken for a key only after comparing their bytes: 4 bytes a
// slot, 5.3 to 10.7 a key, however long the key (a map from hashes held 16 to
// 40, a set of strings a copy of each key). Objects close in LIFO order and
// only the innermost open object adds keys, so the tables are a stack in one
// slice, the innermost last (frame.tab is 1 + where it starts): the memory
// of a closed object's table is reused by the next one's.
//
// An object the Schema reads compares its keys under case folding: its
// table holds one key of each folding class (hashed folded, compared with
// bytes.EqualFold), see foldDuplicate.
type keyTables[O offset] struct {
	slots []O
	fold  []byte // scratch: the folded key of foldSlot
}

// open starts a table for the n keys of the innermost open object and
// returns 1 + where it starts in slots.
func (t *keyTables[O]) open(n int) int {
	off := len(t.slots)
	t.alloc(off, n)
	return off + 1
}

// alloc sets the innermost table, from off, to empty slots enough for n keys
// at most three quarters full (linear probing stays short: ~2.5 probes a
// hit, ~8.5 a miss at the fullest, half that on average as a table fills;
// half full cost twice the memory for a body of keys). The stack grows by
// doubling (reserve).
func (t *keyTables[O]) alloc(off, n int) {
	size := 64
	for 3*size < 4*n {
		size *= 2
	}
	t.slots = reserve(t.slots[:off], size)[:off+size]
	clear(t.slots[off:])
}

// close drops the innermost table, which starts at slots[tab-1].
func (t *keyTables[O]) close(tab int) { t.slots = t.slots[:tab-1] }

// room makes the innermost table, slots[off:], of the object whose keys are
// keys[start:], big enough for n keys, and fills it again when it grows
// (from keys, not from the old table, which is overwritten): the keys of a
// checked object are distinct and each goes to the first empty slot from
// its hash; the table of an object the Schema reads (fold) holds one key of
// each folding class, filled as foldDuplicate fills it.
func (t *keyTables[O]) room(off, start, n int, keys []keyRef[O], b, unescaped []byte, fold bool) {
	if 4*n <= 3*(len(t.slots)-off) {
		return
	}
	t.alloc(off, n)
	tab := t.slots[off:]
	mask := uint64(len(tab) - 1)
	for j := start; j < len(keys); j++ {
		key := keys[j].bytes(b, unescaped)
		if fold {
			if i, prev := t.foldSlot(off, keys, key, b, unescaped); prev == 0 || j <= start+manyKeys {
				t.slots[i] = O(j + 1)
			}
			continue
		}
		i := keyHash(key) & mask
		for tab[i] != 0 {
			i = (i + 1) & mask
		}
		tab[i] = O(j + 1)
	}
}

// add looks key up in the innermost table, slots[off:], and reports whether
// it holds it; when not it adds at (key is keys[at], or will be: at may be
// len(keys)). The caller makes room first.
func (t *keyTables[O]) add(off int, keys []keyRef[O], at int, key, b, unescaped []byte) bool {
	tab := t.slots[off:]
	mask := uint64(len(tab) - 1)
	for i := keyHash(key) & mask; ; i = (i + 1) & mask {
		j := tab[i]
		if j == 0 {
			tab[i] = O(at + 1)
			return false
		}
		if string(keys[j-1].bytes(b, unescaped)) == string(key) {
			return true
		}
	}
}

// foldSlot returns where in the innermost table, slots[off:], a key equal
// to key under case folding is, and 1 + its index in keys; or, when there is
// none, the empty slot where key goes, and 0.
func (t *keyTables[O]) foldSlot(off int, keys []keyRef[O], key, b, unescaped []byte) (int, O) {
	t.fold = appendFolded(t.fold[:0], key)
	tab := t.slots[off:]
	mask := uint64(len(tab) - 1)
	for i := keyHash(t.fold) & mask; ; i = (i + 1) & mask {
		if j := tab[i]; j == 0 || bytes.EqualFold(keys[j-1].bytes(b, unescaped), key) {
			return off + int(i), j
		}
	}
}
