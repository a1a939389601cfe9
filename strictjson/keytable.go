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
// the quotes, or, when it held an escape (start has unescapedBit), its
// unescaped bytes in the unescaped keys, their entry (appendKey) starting
// at end, and start (without the bit) where its raw bytes start in b. It
// holds no pointer, so that keeping keys costs no write barrier, and it is
// two offsets: 8 bytes a key in the uint32 form.
type keyRef[O offset] struct{ start, end O }

// unescapedBit is the top bit of O: set in keyRef.start when the key holds
// an escape.
func unescapedBit[O offset]() O { return ^O(0)>>1 + 1 }

// bytes returns the key's bytes: in b, or in unescaped.
func (k keyRef[O]) bytes(b, unescaped []byte) []byte {
	if bit := unescapedBit[O](); k.start&bit != 0 {
		n, w := keyLen(unescaped[k.end:])
		return unescaped[int(k.end)+w : int(k.end)+w+n]
	}
	return b[k.start:k.end]
}

// appendKey appends to unescaped the key q, a JSON string literal holding
// an escape (quotes included), unescaped (appendUnescaped) after its length:
// seven bits a byte, low first, the high bit set on every byte but the last
// (LEB128), in as many bytes as the length of q takes (the unescaped key is
// shorter than q). An entry is never longer than q, so the unescaped keys
// are never longer than the document.
func appendKey(unescaped, q []byte) []byte {
	u0, w := len(unescaped), 1
	for n := len(q); n >= 0x80; n >>= 7 {
		w++
	}
	unescaped = appendUnescaped(reserve(unescaped, w+len(q))[:u0+w], q)
	n := len(unescaped) - u0 - w
	for j := range w {
		c := byte(n>>(7*j)) & 0x7f
		if j < w-1 {
			c |= 0x80
		}
		unescaped[u0+j] = c
	}
	return unescaped
}

// keyOf returns the bytes of the key whose keyRef.start is ref, from ref
// alone (the tables keep a key as its ref only: slot): a key without
// escape ends at the first '"' from ref, and one with an escape is
// unescaped again, in t.cmp (a table compares the bytes of a key only when
// its tag is the one sought: rarely more than once a key).
func (t *keyTables[O]) keyOf(ref O, b []byte) []byte {
	bit := unescapedBit[O]()
	if ref&bit == 0 {
		return b[ref : int(ref)+bytes.IndexByte(b[ref:], '"')]
	}
	ks := int(ref &^ bit)
	end := ks
	for b[end] != '"' {
		if b[end] == '\\' {
			end++ // the escaped byte: '"' or '\\' among them
		}
		end++
	}
	t.cmp = appendUnescaped(t.cmp[:0], b[ks-1:end+1])
	return t.cmp
}

// keyLen reads the length appendKey wrote at the start of p: the key's
// length and the bytes of the length.
func keyLen(p []byte) (n, w int) {
	for shift := 0; ; shift += 7 {
		c := p[w]
		w++
		n |= int(c&0x7f) << shift
		if c < 0x80 {
			return n, w
		}
	}
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

// workHook, when set (by tests), is called at the end of every scan with
// its key work (keyTables.work).
var workHook func(work int)

// keyHash is the hash of key in the key tables. Its high 32 bits are the
// key's tag in its slot, and the tag places it in the table (home), so that
// a table grows by moving its slots, without reading a key again (room).
func keyHash(key []byte) uint32 { return uint32(maphash.Bytes(keySeed, key)>>32) & uint32(hashMask) }

// home is where the key of tag goes first in a table of size slots: the
// place of tag among the 2^32 tags, scaled to the table (a product and a
// shift: any size, not only powers of two).
func home(tag uint32, size uint64) uint64 { return uint64(tag) * size >> 32 }

// slot is one slot of a key table: the key, as its keyRef.start (ref: 0
// is empty, as no key starts at b[0]), and its tag (keyHash; for an object
// the Schema reads, of its folded form). A probe compares the tags and
// reads a key's bytes (keyOf) only when they are equal: probing past the keys of other
// hashes touches the table alone, not the document (a probe that read the
// bytes of every key it passed cost a cache miss or two each on a body of
// many keys, and made those bodies ten times slower than others).
type slot[O offset] struct {
	ref O
	tag uint32
}

// keyTables holds the key tables of the open objects with more than manyKeys
// keys. A table is open addressing over slots (one key each: where it is
// and its tag), of a size at least 4/3 of the count of its object's keys
// (6/5 for the last keys of a document: room), probed linearly from the
// key's home; it holds no key bytes, so a slot is taken for a key only
// after comparing their bytes, which happens only when their tags are
// equal. The table is all that is kept of its object's keys (Scan's keys
// hold none of them once it opens): 8 bytes a slot, 9.6 to 21.3 a key,
// however long the key, and while it grows the slots it leaves, 5.3 to
// 10.7 more. It doubles as it fills, but never past the
// size for every key the rest of the document can hold (room): the last
// growth of an object that ends the document's keys takes what they need,
// not twice its size. Objects close in LIFO order
// and only the innermost open object adds keys, so the tables are a stack
// in one slice, the innermost last (frame.tab is 1 + where it starts), and
// so are their key counts (held): the memory of a closed object's table is
// reused by the next one's.
//
// An object the Schema reads compares its keys under case folding: its
// table holds one key of each folding class (hashed folded, compared with
// bytes.EqualFold), see foldDuplicate.
//
// work counts the probes and the key comparisons of the tables (one each),
// and Scan adds the comparisons of the objects without one (one a key
// compared): what finding duplicate keys cost. The tests bound it by the
// number of keys (TestKeyWorkIsLinear), through workHook.
type keyTables[O offset] struct {
	slots []slot[O]
	held  []int     // the keys in each table, the innermost's last
	old   []slot[O] // scratch: a table being grown in place
	fold  []byte    // scratch: the folded key of foldSlot
	cmp   []byte    // scratch: a key with an escape, unescaped (keyOf)
	work  int
}

// open starts a table for the n keys of the innermost open object (none of
// them in it yet) and returns 1 + where it starts in slots.
func (t *keyTables[O]) open(n int) int {
	off := len(t.slots)
	size := tableSize(n)
	t.slots = t.alloc(off, size, max(size, off)) // the stack's doubling
	t.held = append(t.held, 0)
	return off + 1
}

// tableSize is the size of a table for n keys: at least 64, at most three
// quarters full (linear probing stays short: ~2.5 probes a hit, ~8.5 a miss
// at the fullest, half that on average as a table fills, and the tags keep
// a probe to the table's own cache lines), a multiple of 8.
func tableSize(n int) int { return max(64, (4*n+23)/24*8) }

// alloc returns slots with the innermost table, from off, set to size
// empty slots: in t.slots's array when it has room, else in a new one with
// room for spare slots more (t.slots's then left as it is). A table opened
// leaves as many more as the stack holds (it grows by doubling, as reserve
// does); a table grown is the size room chose, not twice it, with a
// sixteenth more for the tables of the objects in its own, if any, once
// past what a scratch keeps (keepScratch: the pool keeps one within it).
func (t *keyTables[O]) alloc(off, size, spare int) []slot[O] {
	if off+size > cap(t.slots) {
		s := make([]slot[O], off+size, off+size+spare)
		copy(s, t.slots[:off])
		return s
	}
	s := t.slots[:off+size]
	clear(s[off:])
	return s
}

// close drops the innermost table, which starts at slots[tab-1].
func (t *keyTables[O]) close(tab int) {
	t.slots, t.held = t.slots[:tab-1], t.held[:len(t.held)-1]
}

// keys is the number of keys in the innermost table.
func (t *keyTables[O]) keys() int { return t.held[len(t.held)-1] }

// added counts a key added to the innermost table.
func (t *keyTables[O]) added() { t.held[len(t.held)-1]++ }

// room makes the innermost table, slots[off:], big enough for one more key,
// whose text starts rest bytes before the end of the document. A table
// that grows doubles, or takes the size for all the keys the document can
// still hold if that is less: one a member of at least 5 bytes (`,"":0`);
// it does not grow past three quarters full when those keys cannot take it
// past five sixths (the last keys of a body then probe a little longer,
// instead of a growth holding the old table and the new one at once).
// Its slots move to the bigger table by their tags (home), without reading
// a key: the same keys, each at the first empty slot from its home. They
// move from where they are when the bigger table is a new array (its old
// one is garbage after), and from a copy (old) when it takes the old one's
// place.
func (t *keyTables[O]) room(off, rest int) {
	n, size := t.keys()+1, len(t.slots)-off
	if 4*n <= 3*size || 6*(n+rest/5) <= 5*size {
		return // or the rest of the document cannot fill it past 5/6
	}
	size = max(tableSize(n), min(2*size, tableSize(n+rest/5)))
	from := t.slots[off:]
	if cap(t.slots) >= off+size {
		t.old = append(t.old[:0], from...)
		from = t.old
	}
	spare := size / 16
	if (off+size)*8 <= keepScratch {
		spare = 0
	}
	t.slots = t.alloc(off, size, spare)
	tab := t.slots[off:]
	for _, s := range from {
		if s.ref == 0 {
			continue
		}
		i := home(s.tag, uint64(size))
		for tab[i].ref != 0 {
			if i++; i == uint64(size) {
				i = 0
			}
			t.work++
		}
		tab[i] = s
	}
}

// add looks key (whose keyRef.start is ref) up in the innermost table,
// slots[off:], and reports whether it holds it; when not it adds it. The
// caller makes room first.
func (t *keyTables[O]) add(off int, ref O, key, b []byte) bool {
	tab := t.slots[off:]
	size := uint64(len(tab))
	tag := keyHash(key)
	for i := home(tag, size); ; i = next(i, size) {
		t.work++
		s := tab[i]
		if s.ref == 0 {
			tab[i] = slot[O]{ref, tag}
			t.added()
			return false
		}
		if s.tag == tag {
			t.work++
			if string(t.keyOf(s.ref, b)) == string(key) {
				return true
			}
		}
	}
}

// foldSlot returns where in the innermost table, slots[off:], a key equal
// to key under case folding is, and its ref; or, when there is none, the
// empty slot where key goes, and 0. tag is key's tag there.
func (t *keyTables[O]) foldSlot(off int, key, b []byte) (int, O, uint32) {
	t.fold = appendFolded(t.fold[:0], key)
	tab := t.slots[off:]
	size := uint64(len(tab))
	tag := keyHash(t.fold)
	for i := home(tag, size); ; i = next(i, size) {
		t.work++
		s := tab[i]
		if s.ref == 0 {
			return off + int(i), 0, tag
		}
		if s.tag == tag {
			t.work++
			if bytes.EqualFold(t.keyOf(s.ref, b), key) {
				return off + int(i), s.ref, tag
			}
		}
	}
}

// next is the slot after slot i in a table of size slots.
func next(i, size uint64) uint64 {
	if i++; i == size {
		return 0
	}
	return i
}
