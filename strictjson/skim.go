// The part of Scan that checks the values no Schema member lies in: most of
// a large body (an /a2a call's input), every document Scan reads without a
// Schema.

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
// key, the one that takes it past manyKeys (keys[len(keys)] to be), all
// distinct: each goes to a slot of its own. It returns frame.tab.
func (st *keyState[O]) openTable(keys []keyRef[O], start int, key, b []byte) int {
	st.take()
	tab := st.tables.open(len(keys) - start + 1)
	for j := start; j < len(keys); j++ {
		st.tables.add(tab-1, keys, j, keys[j].bytes(b, st.unescaped), b, st.unescaped)
	}
	st.tables.add(tab-1, keys, len(keys), key, b, st.unescaped)
	return tab
}

// skimFrame is an open container of skim, saved while one it holds is open.
type skimFrame struct {
	start, ustart, tab int // as frame's
	mask               uint64
	object             bool
}

// skim checks the container that b[i] ('{' or '[') opens, depth containers
// deep, holding no object of the Schema (Scan records its span, not those
// of its members): the rules of Scan, with keys compared exactly (keyBit,
// then keyTables past manyKeys keys). It returns the index after the
// container, or -1 when it stops: f.Invalid, f.TooDeep or f.Dup (and
// DupKey) then say why. It adds to f.Lone and f.IntDigits. keys are the
// scan's keys (its open objects'), returned as skim leaves them.
//
// It is Scan's loop without the Schema, in a function of its own so that
// its state stays in registers: one function over the ~90-line rule, as
// scan is, for the same reason (BenchmarkParseThroughput, jsonrpc/).
func skim[O offset](b []byte, i, depth, maxDepth int, keys []keyRef[O], st *keyState[O], f *Facts) (int, []keyRef[O]) {
	var (
		buf       [16]skimFrame
		stack     = buf[:0] // the open containers around the innermost
		lone      bool
		intDigits int
		// The innermost open container.
		object     bool
		start      int // keys[start:] are its keys
		ustart     int // and st.unescaped[ustart:] the unescaped ones
		mask       uint64
		tab        int
		c          = b[i]
		ref        keyRef[O]
		key        []byte
		bit        uint64
		escaped, l bool
	)
open:
	// c, '{' or '[', is b[i].
	if depth == maxDepth {
		f.TooDeep = true
		goto stop
	}
	depth++
	stack = append(stack, skimFrame{start: start, ustart: ustart, tab: tab, mask: mask, object: object})
	object, start, ustart, mask, tab = c == '{', len(keys), len(st.unescaped), 0, 0
	if i = skipSpace(b, i+1); i < len(b) && b[i] == c+2 { // '{'+2 is '}', '['+2 is ']'
		i++
		goto closed
	}
	if object {
		goto key
	}
value:
	// A value starts at b[i].
	if i >= len(b) {
		goto invalid
	}
	switch c = b[i]; c {
	case '{', '[':
		goto open
	case '"':
		if e := plainString(b, i+1); e != 0 {
			i = e
		} else {
			var ok bool
			if i, _, l, ok = str(b, i); !ok {
				goto invalid
			}
			lone = lone || l
		}
	case 't', 'f', 'n':
		if i = literal(b, i); i < 0 {
			goto invalid
		}
	default: // a number, or not a value
		// An integer without sign or leading zero here; any other
		// number in number.
		j := i + 1
		if c-'1' < 9 {
			for j < len(b) && b[j]-'0' < 10 {
				j++
			}
		}
		if c-'1' < 9 && (j == len(b) || b[j] != '.' && b[j]|0x20 != 'e') {
			intDigits = max(intDigits, j-i)
			i = j
		} else {
			var digits int
			if i, digits = number(b, i); i < 0 {
				goto invalid
			}
			intDigits = max(intDigits, digits)
		}
	}
next:
	// After a value: ',' or the innermost container's end.
	if i = skipSpace(b, i); i >= len(b) {
		goto invalid
	}
	if c = b[i]; c == ',' {
		i = skipSpace(b, i+1)
		if object {
			goto key
		}
		goto value
	}
	if object && c != '}' || !object && c != ']' {
		goto invalid
	}
	i++
closed:
	keys, st.unescaped = keys[:start], st.unescaped[:ustart]
	if tab != 0 {
		st.tables.close(tab)
	}
	depth--
	{
		top := &stack[len(stack)-1]
		object, start, ustart, mask, tab = top.object, top.start, top.ustart, top.mask, top.tab
	}
	if stack = stack[:len(stack)-1]; len(stack) > 0 {
		goto next
	}
	f.Lone, f.IntDigits = f.Lone || lone, max(f.IntDigits, intDigits)
	return i, keys
key:
	// An object member starts at b[i].
	if i >= len(b) || b[i] != '"' {
		goto invalid
	}
	if ks := i + 1; ks+8 <= len(b) {
		// A key of less than 8 plain bytes, the common case: its bytes
		// and keyBit from one word.
		v := binary.LittleEndian.Uint64(b[ks:])
		if m := stops(v); m != 0 {
			if n := bits.TrailingZeros64(m) >> 3; b[ks+n] == '"' {
				i = ks + n + 1
				ref, key = keyRef[O]{start: O(ks), end: O(ks + n)}, b[ks:ks+n]
				bit = keyBitOf(v&(1<<(8*n)-1), n)
				goto gotKey
			}
		}
	}
	{
		ks := i + 1
		var ok bool
		if i, escaped, l, ok = str(b, i); !ok {
			goto invalid
		}
		lone = lone || l
		ref = keyRef[O]{start: O(ks), end: O(i - 1)}
		if escaped {
			u0 := len(st.unescaped)
			st.unescaped = appendUnescaped(reserve(st.unescaped, i-ks), b[ks-1:i]) // never longer than its literal
			ref = keyRef[O]{start: O(u0) | unescapedBit[O](), end: O(len(st.unescaped))}
		}
		key = ref.bytes(b, st.unescaped)
		bit = keyBit(key)
	}
gotKey:
	if tab != 0 {
		st.tables.room(tab-1, len(keys)-start+1)
		if st.tables.add(tab-1, keys, len(keys), key, b, st.unescaped) {
			goto dup
		}
	} else {
		if mask&bit != 0 {
			st.tables.work += len(keys) - start
			for _, o := range keys[start:] {
				if string(o.bytes(b, st.unescaped)) == string(key) {
					goto dup
				}
			}
		}
		mask |= bit
		if len(keys)-start+1 > manyKeys {
			tab = st.openTable(keys, start, key, b)
		}
	}
	if len(keys) == cap(keys) {
		keys = st.grow(keys)
	}
	keys = append(keys, ref)
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		goto invalid
	}
	i = skipSpace(b, i+1)
	goto value
dup:
	f.Dup, f.DupKey = true, string(key)
	goto stop
invalid:
	f.Invalid = true
stop:
	f.Lone, f.IntDigits = f.Lone || lone, max(f.IntDigits, intDigits)
	return -1, keys
}
