package strictjson

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MaxDepth is the nesting bound for request bodies, headers and token
// segments (the root container is depth 1).
const MaxDepth = 64

// Facts is what Scan finds in a document, up to the point where it stops:
// the first byte that makes it invalid, the first duplicate key, or the first
// container nested deeper than the bound.
type Facts struct {
	// Invalid: b is not one JSON value in valid UTF-8 (see Scan). Set only
	// for documents utf8.Valid or gjson.ValidBytes refuse.
	Invalid bool
	TooDeep bool   // a container nests deeper than the bound
	Lone    bool   // a string holds a lone UTF-16 surrogate escape
	Dup     bool   // an object holds the same key twice (after unescaping)
	DupKey  string // the first duplicated key
	// FoldDup: an object of the Schema holds two keys equal under Unicode
	// case folding only. Recorded without stopping the scan.
	FoldDup bool
	// IntDigits is the most digits of an integer literal (a number without
	// fraction or exponent; its sign not counted) outside strings.
	IntDigits int
}

// OK reports whether the facts refuse nothing (IntDigits is the caller's to
// judge).
func (f *Facts) OK() bool { return !f.Invalid && !f.TooDeep && !f.Lone && !f.Dup && !f.FoldDup }

// Span is where a member's value lies in the document: b[Start:End], the
// value's raw JSON text without surrounding whitespace. End is 0 when the
// member is absent.
type Span struct{ Start, End int }

// Schema names the members a caller reads, by path from the root object;
// Scan records where their values lie. Build one with NewSchema.
type Schema struct {
	nodes []node // nodes[0] stands for "not read"; nodes[1] is the root
	slots int
}

// node is one object a Schema reads. Its members are sorted by key length:
// those of length l are members[byLen[l]:byLen[l+1]].
type node struct {
	members []member
	byLen   []uint8
}

type member struct {
	key   string
	slot  int   // index in the spans (-1: not recorded)
	child uint8 // node of its value when it is an object (0: none)
}

// NewSchema compiles paths: paths[i] is the dot-separated path of a member
// from the root object ("params.actor.user_id"), and Scan records its value
// in spans[i]. Every proper prefix of a path names an object that is read:
// its keys are also compared under case folding (see the package doc).
// Keys in paths cannot hold a dot.
func NewSchema(paths []string) *Schema {
	s := &Schema{nodes: make([]node, 2), slots: len(paths)}
	for slot, p := range paths {
		n := 1
		rest := p
		for {
			key, tail, more := cut(rest)
			m := s.find(n, key)
			if m < 0 {
				s.nodes[n].members = append(s.nodes[n].members, member{key: key, slot: -1})
				m = len(s.nodes[n].members) - 1
			}
			if !more {
				if s.nodes[n].members[m].slot >= 0 {
					panic("strictjson: path listed twice: " + p)
				}
				s.nodes[n].members[m].slot = slot
				break
			}
			if s.nodes[n].members[m].child == 0 {
				if len(s.nodes) == 256 {
					panic("strictjson: a schema reads at most 255 objects")
				}
				s.nodes = append(s.nodes, node{})
				s.nodes[n].members[m].child = uint8(len(s.nodes) - 1)
			}
			n, rest = int(s.nodes[n].members[m].child), tail
		}
	}
	for i := range s.nodes {
		nd := &s.nodes[i]
		slices.SortStableFunc(nd.members, func(a, b member) int { return len(a.key) - len(b.key) })
		maxLen := 0
		if len(nd.members) > 0 {
			maxLen = len(nd.members[len(nd.members)-1].key)
		}
		if len(nd.members) > 255 {
			panic("strictjson: a schema object reads at most 255 members")
		}
		nd.byLen = make([]uint8, maxLen+2)
		for l := range nd.byLen {
			nd.byLen[l] = uint8(len(nd.members))
			for j, m := range nd.members {
				if len(m.key) >= l {
					nd.byLen[l] = uint8(j)
					break
				}
			}
		}
	}
	return s
}

func cut(p string) (key, rest string, more bool) {
	for i := 0; i < len(p); i++ {
		if p[i] == '.' {
			return p[:i], p[i+1:], true
		}
	}
	return p, "", false
}

func (s *Schema) find(n int, key string) int {
	for i, m := range s.nodes[n].members {
		if m.key == key {
			return i
		}
	}
	return -1
}

// Len is the number of paths: Scan's spans must be at least that long.
func (s *Schema) Len() int { return s.slots }

// member returns the span index of member key of object n (-1 when not
// read) and the node of its value if it is an object (0: none).
func (s *Schema) member(n uint8, key []byte) (int, uint8) {
	nd := &s.nodes[n]
	if len(key)+1 >= len(nd.byLen) {
		return -1, 0
	}
	for _, m := range nd.members[nd.byLen[len(key)]:nd.byLen[len(key)+1]] {
		if m.key == string(key) {
			return m.slot, m.child
		}
	}
	return -1, 0
}

// frame is one open object of the Schema (scan).
type frame struct {
	node   uint8 // its node
	start  int   // keys[start:] are its keys
	ustart int   // and unescaped[ustart:] holds the unescaped ones
	tab    int   // 1 + where the table of them starts (keyTables), once there are many
	// Its keys are compared under case folding (its table holds folding
	// classes):
	fmask uint64 // foldBit of each ASCII key
	fwild bool   // a key holds a non-ASCII byte: compare every key
	at    int    // span where to record it (-1: none)
	vs    int    // where it starts
}

// Scan walks b once and checks the rules of the package doc: that b is one
// JSON value in valid UTF-8 (RFC 8259: the grammar gjson.ValidBytes
// accepts, whitespace around the value included, and valid UTF-8 in its
// strings, as utf8.Valid requires), nesting at most maxDepth, with no lone
// surrogate escape, no duplicate key at any depth (keys compared after
// unescaping), and in the objects of s no keys equal under case folding. It
// also counts the digits of the longest integer literal (Facts.IntDigits).
// It stops at the first byte that makes b invalid (Facts.Invalid), at the
// first duplicate key and at the first container nested deeper than
// maxDepth: what it reports is what it found before, so a document may be
// reported with a duplicate key and not as invalid when the key comes
// before its syntax error: a caller that must name the first rule broken
// checks a document that is not OK again rule by rule (checkSlow,
// jsonrpc's parseSlow). Keys without escapes are compared in place (no
// allocation).
//
// When s is not nil, Scan also records in spans (len(spans) >= s.Len()) the
// value spans of the members s names, the root being b's top-level object.
// They are complete only when the facts are OK.
//
// The keys of the open objects cost 8 bytes each (16 at most with the
// doubling of their slice) until an object has more than manyKeys; then its
// keys are kept in a table alone (keyTables: 10.7 to 21.3 bytes a key, and
// while it grows 5.3 to 10.7 more), so that at most manyKeys keys of each
// open object are in keys: finding a duplicate costs a bounded number of
// probes and comparisons a key, however many keys an object has
// (TestKeyWorkIsLinear). Past the stack's buffers a scan takes them from a
// pool (scratch), bounded; a document of more than wideAbove bytes is
// scanned by the same code with 64-bit offsets.
//
// The containers no object of s lies in (all of b when s is nil, most of a
// large /a2a body) are read by skim, whose loop calls no function and reads
// plain strings and keys (ASCII, no escape) eight bytes at a time; the
// members of an object with many keys have a loop of their own
// (tableMembers). BenchmarkParseThroughput (jsonrpc/) measures both.
func Scan(b []byte, maxDepth int, s *Schema, spans []Span) Facts {
	if len(b) > wideAbove {
		return scan[uint64](b, maxDepth, s, spans, &scratch64)
	}
	return scan[uint32](b, maxDepth, s, spans, &scratch32)
}

// scan is Scan keeping offsets and key indexes of type O (see offset).
//
// It reads the objects of the Schema, the values of their members that
// are not containers, and sends every other container to skim. It is one
// function over the ~90-line rule: the loop of the objects a caller reads,
// each state a label (a goto does not leave a function).
func scan[O offset](b []byte, maxDepth int, s *Schema, spans []Span, pool *sync.Pool) Facts {
	var (
		facts    Facts
		frameBuf [16]frame
		keyBuf   [64]keyRef[O]
		st       = keyState[O]{pool: pool}
	)
	// The open objects of the Schema and the keys of every open object,
	// on the stack for ordinary documents.
	stack, keys := frameBuf[:0], keyBuf[:0]
	var n uint8 // node of the value at b[i], if an object of the Schema
	if s != nil {
		n = 1
		spans = spans[:s.slots]
	}
	at := -1 // span where to record the value at b[i]
	i := skipSpace(b, 0)
	for {
		// A value starts at b[i].
		if i >= len(b) {
			goto invalid
		}
		vs := i
		switch c := b[i]; c {
		case '{', '[':
			if c == '[' || n == 0 {
				// No object of the Schema in it.
				if i, keys = skim(b, i, len(stack), maxDepth, keys, &st, &facts); i < 0 {
					goto done
				}
				break
			}
			if len(stack) == maxDepth {
				facts.TooDeep = true
				goto done
			}
			stack = append(stack, frame{node: n, start: len(keys), ustart: len(st.unescaped), at: at, vs: i})
			if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
				goto next // empty
			}
			goto key
		case '"':
			if e := plainString(b, i+1); e != 0 {
				i = e
				break
			}
			var lone, ok bool
			if i, _, lone, ok = str(b, i); !ok {
				goto invalid
			}
			facts.Lone = facts.Lone || lone
		case 't', 'f', 'n':
			if i = literal(b, i); i < 0 {
				goto invalid
			}
		default: // a number, or not a value
			j, digits := plainNumber(b, i)
			if j < 0 {
				if j, digits = number(b, i); j < 0 {
					goto invalid
				}
			}
			i, facts.IntDigits = j, max(facts.IntDigits, digits)
		}
		if at >= 0 {
			spans[at] = Span{vs, i}
		}
	next:
		// After a value: b[i] is ',' or closes objects, or the document
		// ends.
		for i = skipSpace(b, i); ; i = skipSpace(b, i) {
			if len(stack) == 0 {
				if i != len(b) {
					goto invalid // trailing data
				}
				goto done
			}
			if i >= len(b) {
				goto invalid
			}
			if b[i] == ',' {
				break
			}
			if b[i] != '}' {
				goto invalid
			}
			i++
			top := &stack[len(stack)-1]
			if top.at >= 0 {
				spans[top.at] = Span{top.vs, i}
			}
			keys, st.unescaped = keys[:top.start], st.unescaped[:top.ustart]
			if top.tab != 0 {
				st.tables.close(top.tab)
			}
			stack = stack[:len(stack)-1]
		}
		i = skipSpace(b, i+1)
	key:
		// A member of the innermost object starts at b[i]: its keys are
		// compared under case folding, which also finds exact duplicates.
		{
			if i >= len(b) || b[i] != '"' {
				goto invalid
			}
			top := &stack[len(stack)-1]
			if top.tab != 0 {
				r := tableMembers(b, i, top.tab, s, top.node, &st, &facts.IntDigits)
				i, facts.FoldDup = r.i, facts.FoldDup || r.fold
				switch r.where {
				case atValue:
					n, at = r.child, r.slot
					continue
				case atNext:
					goto next
				case atDup:
					facts.Dup, facts.DupKey = true, string(r.dup)
					goto done
				case atInvalid:
					goto invalid
				}
			}
			ks := i + 1
			ref := keyRef[O]{start: O(ks)}
			if e := plainString(b, ks); e != 0 {
				i, ref.end = e, O(e-1)
			} else {
				var esc, lone, ok bool
				if i, esc, lone, ok = str(b, i); !ok {
					goto invalid
				}
				facts.Lone = facts.Lone || lone
				ref.end = O(i - 1)
				if esc {
					ref.end = O(len(st.unescaped))
					ref.start |= unescapedBit[O]()
					st.unescaped = appendKey(st.unescaped, b[ks-1:i])
				}
			}
			key := ref.bytes(b, st.unescaped)
			if top.tab == 0 && len(keys)-top.start+1 > manyKeys {
				st.take() // for its table
			}
			exact, fold := foldDuplicate(top, keys, ref, key, b, st.unescaped, &st.tables, len(b)-ks)
			if exact {
				facts.Dup, facts.DupKey = true, string(key)
				goto done
			}
			facts.FoldDup = facts.FoldDup || fold
			if top.tab != 0 {
				// In its table: found again from b (keyOf).
				keys = keys[:top.start]
				if ref.start&unescapedBit[O]() != 0 {
					st.unescaped = st.unescaped[:ref.end]
				}
			} else {
				if len(keys) == cap(keys) {
					keys = st.grow(keys)
				}
				keys = append(keys, ref)
			}
			at, n = s.member(top.node, key)
			if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
				goto invalid
			}
			i = skipSpace(b, i+1)
		}
	}
invalid:
	facts.Invalid = true
done:
	if workHook != nil {
		workHook(st.tables.work)
	}
	if st.sc != nil {
		st.sc.keep(pool, st.unescaped, &st.tables)
	}
	return facts
}

// foldDuplicate compares key, a new key of the read object top (ref is its
// keyRef), with its earlier keys, keys[top.start:] or its table: exact when
// one is the same key (after unescaping), fold when one is equal to it under
// Unicode case folding only. ASCII keys are first sifted by foldBit; past
// manyKeys keys the object has a table (keyTables) of one key per folding
// class, the class's last key among the first manyKeys+1 and then its first
// one: a key is compared with that one only (as a set from folded key to key
// did). Once the table is open, key is in it (or its class is): the caller
// keeps none of the object's keys in keys. key's text starts rest bytes
// before the end of b (keyTables.room).
func foldDuplicate[O offset](top *frame, keys []keyRef[O], ref keyRef[O], key, b, unescaped []byte, t *keyTables[O], rest int) (exact, fold bool) {
	if top.tab != 0 {
		t.room(top.tab-1, rest)
		i, prevRef, tag := t.foldSlot(top.tab-1, key, b)
		if prevRef != 0 {
			prev := t.keyOf(prevRef, b)
			return string(prev) == string(key), string(prev) != string(key)
		}
		t.slots[i] = slot[O]{ref.start, tag}
		t.added()
		return false, false
	}
	ascii := isASCII(key)
	bit := foldBit(key)
	if !ascii || top.fwild || top.fmask&bit != 0 {
		t.work += len(keys) - top.start
		for _, o := range keys[top.start:] {
			if ob := o.bytes(b, unescaped); string(ob) == string(key) {
				return true, false
			} else if !fold && bytes.EqualFold(ob, key) {
				fold = true
			}
		}
	}
	top.fmask |= bit
	top.fwild = top.fwild || !ascii
	if len(keys)-top.start+1 > manyKeys {
		// Each key takes the slot of its class: the last one stays.
		top.tab = t.open(len(keys) - top.start + 1)
		for j := top.start; j <= len(keys); j++ {
			k, r := key, ref
			if j < len(keys) {
				k, r = keys[j].bytes(b, unescaped), keys[j]
			}
			i, prev, tag := t.foldSlot(top.tab-1, k, b)
			if prev == 0 {
				t.added()
			}
			t.slots[i] = slot[O]{r.start, tag}
		}
	}
	return false, fold
}

// foldBit is a one-bit summary of a key (its length and its first, middle
// and last bytes) ignoring ASCII letter case: ASCII keys equal under case
// folding have equal bits. (It says nothing of non-ASCII keys, whose folding
// can change their length: they are compared with every key.)
func foldBit(k []byte) uint64 {
	if len(k) == 0 {
		return 1
	}
	lower := func(c byte) uint {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return uint(c)
	}
	h := uint(len(k))*31 + lower(k[0])
	h = h*31 + lower(k[len(k)/2])
	h = h*31 + lower(k[len(k)-1])
	return 1 << (h & 63)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Fold returns the folded form of the UTF-8 key k (appendFolded): two keys
// have the same folded form exactly when bytes.EqualFold holds, which is how
// encoding/json matches a key to a struct field.
func Fold(k string) string { return string(appendFolded(nil, []byte(k))) }

// appendFolded appends the folded form of the UTF-8 key k: two keys have the
// same folded form exactly when bytes.EqualFold holds (each rune replaced by
// the smallest rune of its Unicode simple-fold orbit, as encoding/json's
// foldName does).
func appendFolded(dst, k []byte) []byte {
	// ASCII first, in place (most keys are ASCII only).
	n := len(dst)
	dst = slices.Grow(dst, len(k))[:n+len(k)]
	i := 0
	for ; i+8 <= len(k); i += 8 {
		// Eight ASCII bytes at a time: the high bit of each byte in
		// 'a'..'z' is set in lower, and 0x20 taken from those bytes (no
		// byte carries into the next: each is below 0x80).
		v := binary.LittleEndian.Uint64(k[i:])
		if v&highs != 0 {
			break
		}
		lower := (v + (0x80-'a')*ones) &^ (v + (0x80-'z'-1)*ones) & highs
		binary.LittleEndian.PutUint64(dst[n+i:], v-lower>>2)
	}
	for ; i < len(k) && k[i] < utf8.RuneSelf; i++ {
		c := k[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst[n+i] = c
	}
	dst = dst[:n+i]
	for i < len(k) {
		if c := k[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(k[i:])
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		dst = utf8.AppendRune(dst, r)
		i += n
	}
	return dst
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace (space, tab, line feed, carriage return).
func skipSpace(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' { // no whitespace: the common case, inlined
		return i
	}
	for i < len(b) && b[i] <= ' ' && spaces>>b[i]&1 != 0 {
		i++
	}
	return i
}

// spaces has bit c set for the JSON whitespace bytes c (all below 64): a
// test without a table, whose address would take a register in the loops.
const spaces = 1<<' ' | 1<<'\t' | 1<<'\n' | 1<<'\r'

// isSpace[c] is true for the JSON whitespace bytes.
var isSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// FirstByte returns the first byte of the valid JSON document b that is not
// whitespace: what kind of value it is ('{' for an object).
func FirstByte(b []byte) byte { return b[skipSpace(b, 0)] }

// literal reads the literal true, false or null that b[i] ('t', 'f' or 'n')
// starts and returns the index after it, or -1 when it is not there.
func literal(b []byte, i int) int {
	w := "null"
	switch b[i] {
	case 't':
		w = "true"
	case 'f':
		w = "false"
	}
	if len(b)-i < len(w) || string(b[i:i+len(w)]) != w {
		return -1
	}
	return i + len(w)
}

// number reads the JSON number at b[i:] (RFC 8259: an optional '-', an
// integer part without leading zeros, then an optional fraction and
// exponent, each with at least one digit) and returns the index after it,
// or -1 when b[i:] does not start with one. intDigits is the number of
// digits of its integer part when it has no fraction and no exponent, else
// 0. What follows the number is the caller's to check.
func number(b []byte, i int) (end, intDigits int) {
	if b[i] == '-' {
		i++
	}
	start := i
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1, 0
	}
	intDigits = i - start
	if i < len(b) && b[i] == '.' {
		if i++; i == len(b) || b[i] < '0' || b[i] > '9' {
			return -1, 0
		}
		i, intDigits = digits(b, i), 0
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || b[i] < '0' || b[i] > '9' {
			return -1, 0
		}
		i, intDigits = digits(b, i), 0
	}
	return i, intDigits
}

// digits returns the index of the first byte at or after i that is not an
// ASCII digit.
func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// keyBits is a two-bit summary of a key: equal keys have equal bits, so a
// key whose bits are not both in an object's mask is not a duplicate there.
// It mixes the length and the first and last eight bytes (a key of less
// than eight bytes: all of them, the word skimHot reads it from), so that
// the few keys of an ordinary object rarely take each other's bits (a key
// whose bits are taken is compared with every earlier key).
func keyBits(k []byte) uint64 {
	var w uint64
	if len(k) >= 8 {
		w = binary.LittleEndian.Uint64(k) ^ bits.RotateLeft64(binary.LittleEndian.Uint64(k[len(k)-8:]), 29)
	} else {
		for j, c := range k {
			w |= uint64(c) << (8 * j)
		}
	}
	return keyBitsOf(w, len(k))
}

// keyBitsOf is keyBits of a key of length n whose bytes it mixes into w.
func keyBitsOf(w uint64, n int) uint64 {
	h := (w + uint64(n)) * 0x9E3779B97F4A7C15
	return 1<<(h>>58) | 1<<(h>>52&63)
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plain[c] is true for the bytes a string holds as they are: ASCII, not a
// control character, not '"' or '\\'.
var plain = func() (t [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// stops flags the bytes of v (eight bytes of a string, little-endian) that
// a string does not hold as they are: '"', '\\', a control character or a
// byte from 0x80. The lowest flagged byte (the high bit of its byte in the
// result) is the first such byte; a flag above it may be false (a borrow).
//
// A byte of v from 0x20 to 0x7f, not '"' or '\\', with no borrow from below,
// sets no high bit in q-ones, bs-ones (q and bs are 0x01 to 0x7f), v-' '*ones
// or v; the first byte that is not one sets one (q or bs is 0, v is below
// ' ', or v has its high bit), and only such a byte borrows from the next.
func stops(v uint64) uint64 {
	q, bs := v^('"'*ones), v^('\\'*ones)
	return ((q - ones) | (bs - ones) | (v - ' '*ones) | v) & highs
}

// plainString returns the index after the closing quote of the string
// whose bytes start at b[j] when they are all plain (ASCII, no control
// character, no escape), read eight at a time; else, or when the string
// ends in b's last eight bytes, 0 (str reads it).
func plainString(b []byte, j int) int {
	for j+8 <= len(b) {
		if m := stops(binary.LittleEndian.Uint64(b[j:])); m != 0 {
			if j += bits.TrailingZeros64(m) >> 3; b[j] == '"' {
				return j + 1
			}
			return 0
		}
		j += 8
	}
	return 0
}

// str reads the string whose opening quote is b[i] and returns the index
// after its closing quote, whether it holds an escape and whether one of its
// escapes is a lone surrogate. ok is false when b[i:] does not start with a
// valid string: one that ends, holds no control character (below ' '), only
// the escapes of JSON (\" \\ \/ \b \f \n \r \t and \u with four hex digits)
// and valid UTF-8.
func str(b []byte, i int) (end int, esc, lone, ok bool) {
	i++
	for {
		// Eight bytes at a time while each is plain (ASCII, not a control
		// character, '"' or '\\'). The lowest byte the test flags is the
		// first that is not plain (a flag above a flagged byte may be
		// false: a borrow): the scan goes to it at once.
		for i+8 <= len(b) {
			if m := stops(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i == len(b) {
			return i, esc, lone, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc, lone, true
		case c == '\\':
			esc = true
			if i+1 == len(b) {
				return i, esc, lone, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				n, l := surrogateEscape(b, i)
				if n == 0 {
					return i, esc, lone, false
				}
				lone = lone || l
				i += n
			default:
				return i, esc, lone, false
			}
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return i, esc, lone, false
			}
			i += n
		default: // a control character
			return i, esc, lone, false
		}
	}
}

// surrogateEscape reads the \uXXXX escape at b[i:] and returns its length in
// bytes (12 for a high+low surrogate pair, else 6; 0 when its four hex
// digits are not there) and whether it is a lone surrogate.
func surrogateEscape(b []byte, i int) (int, bool) {
	if len(b)-i < 6 {
		return 0, false
	}
	u := hex4(b[i+2 : i+6])
	switch {
	case u < 0:
		return 0, false
	case u >= 0xDC00 && u <= 0xDFFF:
		return 6, true
	case u >= 0xD800 && u <= 0xDBFF:
		if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if low := hex4(b[i+8 : i+12]); low >= 0xDC00 && low <= 0xDFFF {
				return 12, false
			}
		}
		return 6, true
	}
	return 6, false
}

// hex4 returns the value of the four hex digits h, or -1 when one is not a
// hex digit.
func hex4(h []byte) int {
	n := 0
	for _, c := range h {
		n <<= 4
		switch {
		case c >= '0' && c <= '9':
			n |= int(c - '0')
		case c >= 'a' && c <= 'f':
			n |= int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			n |= int(c-'A') + 10
		default:
			return -1
		}
	}
	return n
}
