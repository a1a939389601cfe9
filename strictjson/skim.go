// The part of Scan that checks the containers no object of the Schema lies
// in: most of a large body (an /a2a call's input), every document Scan reads
// without a Schema.

package strictjson

import (
	"encoding/binary"
	"math/bits"
	"sync"
)

// keyState is what a scan keeps of the keys of its open objects besides
// the keys themselves (the scan's keys, on its stack until they outgrow
// keyBuf): the keys that held an escape, unescaped, the tables of the
// objects with many keys, and, once taken from pool, the scratch that holds
// those buffers (and the keys, once heapKeys).
type keyState[O offset] struct {
	unescaped []byte
	tables    keyTables[O]
	sc        *scratch[O]
	heapKeys  bool
	pool      *sync.Pool
}

// take takes the scan's scratch from its pool, once.
func (st *keyState[O]) take() {
	if st.sc == nil {
		st.sc = takeScratch[O](st.pool, &st.unescaped, &st.tables)
	}
}

// grow returns keys (full) with room for one more key, in st.sc.keys (the
// scan's keyBuf stays on its stack: keys never leaves the scan).
func (st *keyState[O]) grow(keys []keyRef[O]) []keyRef[O] {
	st.take()
	if !st.heapKeys {
		st.sc.keys, st.heapKeys = append(st.sc.keys[:0], keys...), true
	}
	st.sc.keys = reserve(st.sc.keys[:len(keys)], 1)
	return st.sc.keys
}

// openTable opens the table of an object whose keys are keys[start:] and
// key (ref), the one that takes it past manyKeys, all distinct: each goes to
// a slot of its own. It returns frame.tab; the caller then keeps none of the
// object's keys in keys.
func (st *keyState[O]) openTable(keys []keyRef[O], start int, ref keyRef[O], key, b []byte) int {
	st.take()
	tab := st.tables.open(len(keys) - start + 1)
	for j := start; j < len(keys); j++ {
		st.tables.add(tab-1, keys[j].start, keys[j].bytes(b, st.unescaped), b)
	}
	st.tables.add(tab-1, ref.start, key, b)
	return tab
}

// skim checks the container that b[i] ('{' or '[') opens, depth containers
// deep, holding no object of the Schema (Scan records its span, not those
// of its members): the rules of Scan, with keys compared exactly (keyBits,
// then keyTables past manyKeys keys). It returns the index after the
// container, or -1 when it stops: f.Invalid, f.TooDeep or f.Dup (and
// DupKey) then say why. It adds to f.Lone and f.IntDigits. keys are the
// scan's keys (its open objects'), returned as skim leaves them.
//
// skimHot reads what it can (plain strings and keys, integers and
// decimals, literals, structure, keys of objects without a table); skim
// reads each of the rest (any other string, number or key, a container past
// its frames) where skimHot stops, with the code of scan, and lets it go on.
func skim[O offset](b []byte, i, depth, maxDepth int, keys []keyRef[O], st *keyState[O], f *Facts) (int, []keyRef[O]) {
	var buf [16]skimFrame
	c := skimCursor[O]{i: i, frames: buf[:], limit: maxDepth - depth, start: -1, st: st, resume: resOpen}
	for {
		var op int
		switch op, keys = skimHot(b, keys, &c); op {
		case opDone:
			f.Lone, f.IntDigits = f.Lone || c.lone, max(f.IntDigits, c.intDigits)
			return c.i, keys
		case opOpen:
			if c.d == c.limit {
				f.TooDeep = true
				goto stop
			}
			c.frames = append(c.frames, make([]skimFrame, len(c.frames))...)
			c.resume = resOpen
		case opValue:
			if !c.value(b) {
				goto invalid
			}
			c.resume = resNext
		case opKey:
			if c.tab != 0 {
				// An object of many keys: its members in a loop of
				// their own, as long as they are plain.
				r := tableMembers(b, c.i, c.tab, nil, 0, st, &c.intDigits)
				c.i = r.i
				switch r.where {
				case atValue:
					c.resume = resValue
					continue
				case atNext:
					c.resume = resNext
					continue
				case atDup:
					f.Dup, f.DupKey = true, string(r.dup)
					goto stop
				case atInvalid:
					goto invalid
				}
			}
			var r int
			switch r, keys = c.key(b, keys, f); r {
			case keyInvalid:
				goto invalid
			case keyDup:
				goto stop
			}
			c.resume = resValue
		default:
			goto invalid
		}
	}
invalid:
	f.Invalid = true
stop:
	f.Lone, f.IntDigits = f.Lone || c.lone, max(f.IntDigits, c.intDigits)
	return -1, keys
}

// skimCursor is where skimHot is, and what it keeps, between its calls.
type skimCursor[O offset] struct {
	i      int
	resume uint8 // where skimHot goes on: resOpen, resValue, resNext
	// The open containers: frames[:d]. The innermost's keys are the
	// scan's keys[start:] (start -1: an array), its keyBits or-ed in mask
	// (all bits set: the object has a table, tab, see frame, which holds
	// its keys: keys[start:] is empty).
	frames []skimFrame
	d      int
	limit  int // the containers skim may open (maxDepth less those around)
	start  int
	mask   uint64
	tab    int
	st     *keyState[O]

	lone      bool
	intDigits int
}

// skimFrame is an open container of skim: what it saves of the one around
// it (start, mask, tab) and where its unescaped keys start.
type skimFrame struct {
	start, tab, ustart int
	mask               uint64
}

// Where skimHot resumes (skimCursor.resume): at b[i], a container to open,
// a value, the byte after a value.
const (
	resOpen = iota
	resValue
	resNext
)

// What skimHot stops at: the container skim reads is read (c.i after it);
// the byte at c.i is not JSON where it is; a container to open with its
// frames full, or nesting too deep; a value, or a key, at c.i for skim to
// read.
const (
	opDone = iota
	opInvalid
	opOpen
	opValue
	opKey
)

// Literals as read little-endian from their first byte (false: from its
// second).
const (
	wordTrue uint32 = 't' | 'r'<<8 | 'u'<<16 | 'e'<<24
	wordNull uint32 = 'n' | 'u'<<8 | 'l'<<16 | 'l'<<24
	wordAlse uint32 = 'a' | 'l'<<8 | 's'<<16 | 'e'<<24
)

// skimHot is skim's loop: it reads from c.i, as c.resume says, until the
// container skim reads ends or it stops at a byte it leaves to skim (see
// the op constants). It calls no function (a call in the loop made its
// state go through memory at every value) and it keeps only the innermost
// container in variables.
//
// One function over the ~90-line rule, as scan is, for the same reason
// (BenchmarkParseThroughput, jsonrpc/).
func skimHot[O offset](b []byte, keys []keyRef[O], c *skimCursor[O]) (op int, _ []keyRef[O]) {
	// Few variables, so that they stay in registers: b without its
	// capacity (reslicing b needs it: here its length), the open
	// containers in c but the innermost's keys (start) and mask.
	b = b[:len(b):len(b)]
	i, start, mask := c.i, c.start, c.mask
	var ch byte
	switch c.resume {
	case resValue:
		goto value
	case resNext:
		goto next
	}
	ch = b[i]
open:
	// ch, '{' or '[', is b[i].
	if c.d == len(c.frames) || c.d == c.limit {
		op = opOpen
		goto exit
	}
	c.frames[c.d] = skimFrame{start: start, tab: c.tab, mask: mask, ustart: len(c.st.unescaped)}
	c.d++
	start, mask, c.tab = -1, 0, 0
	if ch == '{' {
		start = len(keys)
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == ch+2 { // '{'+2 is '}', '['+2 is ']'
		i++
		goto closed
	}
	if start >= 0 {
		goto key
	}
value:
	// A value starts at b[i].
	if i >= len(b) {
		op = opInvalid
		goto exit
	}
	ch = b[i]
valueCh:
	// A value starts at b[i], ch.
	if ch == '"' {
		// The most common value first: plainString, the flagged byte
		// and the one after it read from v (not loaded again: the
		// next token waits on them).
		for j := i + 1; j+8 <= len(b); j += 8 {
			v := binary.LittleEndian.Uint64(b[j:])
			if m := stops(v); m != 0 {
				n := bits.TrailingZeros64(m) &^ 7
				if byte(v>>n) != '"' {
					break
				}
				i = j + n>>3 + 1
				if ch = byte(v >> (n + 8)); n < 56 && ch > ' ' {
					goto nextCh
				}
				goto next
			}
		}
		op = opValue
		goto exit
	}
	switch ch {
	case '{', '[':
		goto open
	case 't', 'n':
		w := wordTrue
		if ch == 'n' {
			w = wordNull
		}
		if i+4 > len(b) || binary.LittleEndian.Uint32(b[i:]) != w {
			op = opValue
			goto exit
		}
		i += 4
	case 'f':
		if i+5 > len(b) || binary.LittleEndian.Uint32(b[i+1:]) != wordAlse {
			op = opValue
			goto exit
		}
		i += 5
	default:
		// A number without exponent (plainNumber, inline here).
		j := i
		if ch == '-' {
			j++
		}
		if j >= len(b) || b[j]-'0' >= 10 {
			op = opValue
			goto exit
		}
		if j++; b[j-1] != '0' {
			for j < len(b) && b[j]-'0' < 10 {
				j++
			}
		}
		digits := j - i
		if ch == '-' {
			digits--
		}
		if j < len(b) && b[j] == '.' {
			if j++; j >= len(b) || b[j]-'0' >= 10 {
				op = opValue
				goto exit
			}
			for j < len(b) && b[j]-'0' < 10 {
				j++
			}
			digits = 0
		}
		if j < len(b) && b[j]|0x20 == 'e' {
			op = opValue
			goto exit
		}
		if digits > c.intDigits {
			c.intDigits = digits
		}
		i = j
	}
next:
	// After a value: ',' or the innermost container's end.
	if i = skipSpace(b, i); i >= len(b) {
		op = opInvalid
		goto exit
	}
	ch = b[i]
nextCh:
	// ch is b[i], not whitespace.
	if ch == ',' {
		i = skipSpace(b, i+1)
		if start >= 0 {
			goto key
		}
		goto value
	}
	if start >= 0 && ch != '}' || start < 0 && ch != ']' {
		op = opInvalid
		goto exit
	}
	i++
closed:
	c.d--
	if start >= 0 {
		keys = keys[:start]
		c.st.unescaped = c.st.unescaped[:c.frames[c.d].ustart]
		if c.tab != 0 {
			c.st.tables.close(c.tab)
		}
	}
	{
		f := &c.frames[c.d]
		start, mask, c.tab = f.start, f.mask, f.tab
	}
	if c.d > 0 {
		goto next
	}
	op = opDone
	goto exit
key:
	// An object member starts at b[i].
	{
		if i >= len(b) || b[i] != '"' {
			op = opInvalid
			goto exit
		}
		// A plain key, its keyBits from its first and last eight bytes
		// (all of a key under eight bytes: one word).
		ks := i + 1
		if ks+8 > len(b) {
			op = opKey
			goto exit
		}
		v := binary.LittleEndian.Uint64(b[ks:])
		v0, n := v, 64 // n: the bit of v0 where the key's closing quote is
		var ke int
		if m := stops(v); m != 0 {
			n = bits.TrailingZeros64(m) &^ 7
			if byte(v>>n) != '"' {
				op = opKey
				goto exit
			}
			ke, v = ks+n>>3, v&(1<<n-1)
		} else {
			if ke = plainString(b, ks+8) - 1; ke < 0 {
				op = opKey
				goto exit
			}
			v ^= bits.RotateLeft64(binary.LittleEndian.Uint64(b[ke-8:]), 29)
		}
		kb := keyBitsOf(v, ke-ks)
		if mask&kb == kb {
			// Maybe a duplicate: a key under eight bytes is compared
			// here with the earlier keys of its length, as words; any
			// other, or one equal, or one of an object with a table, by
			// key.
			if ke-ks >= 8 || c.tab != 0 {
				op = opKey
				goto exit
			}
			low := uint64(1)<<(8*(ke-ks)) - 1
			for _, o := range keys[start:] {
				if o.start&unescapedBit[O]() != 0 ||
					int(o.end-o.start) == ke-ks && binary.LittleEndian.Uint64(b[o.start:])&low == v {
					op = opKey
					goto exit
				}
			}
			c.st.tables.work += len(keys) - start
		}
		if len(keys)-start >= manyKeys || len(keys) == cap(keys) {
			op = opKey // a table to open or keys to grow
			goto exit
		}
		mask |= kb
		keys = keys[:len(keys)+1]
		keys[len(keys)-1] = keyRef[O]{start: O(ks), end: O(ke)}
		if n <= 40 && byte(v0>>(n+8)) == ':' {
			// ':' and the value's first byte in v0 too.
			if ch = byte(v0 >> (n + 16)); ch > ' ' {
				i = ke + 2
				goto valueCh
			}
		}
		if i = skipSpace(b, ke+1); i >= len(b) || b[i] != ':' {
			op = opInvalid
			goto exit
		}
		i = skipSpace(b, i+1)
		goto value
	}
exit:
	c.i, c.start, c.mask = i, start, mask
	return op, keys
}

// value reads the value at b[c.i] with scan's code (a string, a number or
// a literal; a container is skimHot's): false when it is not one.
func (c *skimCursor[O]) value(b []byte) bool {
	i := c.i
	switch b[i] {
	case '"':
		var l, ok bool
		if i, _, l, ok = str(b, i); !ok {
			return false
		}
		c.lone = c.lone || l
	case 't', 'f', 'n':
		if i = literal(b, i); i < 0 {
			return false
		}
	default:
		var digits int
		if i, digits = number(b, i); i < 0 {
			return false
		}
		c.intDigits = max(c.intDigits, digits)
	}
	c.i = i
	return true
}

// What key found.
const (
	keyOK = iota
	keyInvalid
	keyDup
)

// key reads the member whose key starts at b[c.i] up to its value, with
// scan's code: its key is compared with the earlier keys of its object (by
// its keyBits, or in its table) and added to keys, or to its table.
func (c *skimCursor[O]) key(b []byte, keys []keyRef[O], f *Facts) (int, []keyRef[O]) {
	st, start := c.st, c.start
	ks := c.i + 1
	i, escaped, l, ok := str(b, c.i)
	if !ok {
		return keyInvalid, keys
	}
	c.lone = c.lone || l
	ref := keyRef[O]{start: O(ks), end: O(i - 1)}
	if escaped {
		ref = keyRef[O]{start: O(ks) | unescapedBit[O](), end: O(len(st.unescaped))}
		st.unescaped = appendKey(st.unescaped, b[ks-1:i])
	}
	key := ref.bytes(b, st.unescaped)
	if c.tab != 0 {
		st.tables.room(c.tab-1, len(b)-ks)
		if st.tables.add(c.tab-1, ref.start, key, b) {
			f.Dup, f.DupKey = true, string(key)
			return keyDup, keys
		}
		if escaped {
			st.unescaped = st.unescaped[:ref.end] // found again from b (keyOf)
		}
	} else {
		kb := keyBits(key)
		if c.mask&kb == kb {
			st.tables.work += len(keys) - start
			for _, o := range keys[start:] {
				if string(o.bytes(b, st.unescaped)) == string(key) {
					f.Dup, f.DupKey = true, string(key)
					return keyDup, keys
				}
			}
		}
		c.mask |= kb
		if len(keys)-start+1 > manyKeys {
			c.tab, c.mask = st.openTable(keys, start, ref, key, b), ^uint64(0)
			keys = keys[:start] // in its table
		} else {
			if len(keys) == cap(keys) {
				keys = st.grow(keys)
			}
			keys = append(keys, ref)
		}
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		return keyInvalid, keys
	}
	c.i = skipSpace(b, i+1)
	return keyOK, keys
}
