// The members of an object with many keys, read in a loop of their own.

package strictjson

import (
	"bytes"
	"encoding/binary"
)

// Where tableMembers stops (memberRun.where).
const (
	atKey     = iota // b[i], '"', starts a member it leaves (not read)
	atValue          // b[i] starts the value of a member it read: slot and child say what it is
	atNext           // b[i] is the first byte after a member's value that is not whitespace
	atDup            // a key duplicates an earlier one (exactly): dup
	atInvalid        // b[i] is not JSON where it is
)

// memberRun is where tableMembers stopped and what it found.
type memberRun struct {
	i     int
	where int
	slot  int    // atValue: as Schema.member
	child uint8  // atValue: as Schema.member
	fold  bool   // two keys are equal under case folding only
	dup   []byte // atDup: the key
}

// tableMembers reads the members of the innermost open object of a scan,
// which has a table (tab, as frame's), from b[i], where a key starts, for
// as long as they are plain: a key that plainString reads and a value
// plainValue reads, not one the Schema reads. The keys go to the table,
// compared exactly, or, for an object of the Schema (node, not 0), under
// case folding, as scan compares them. It adds to *intDigits.
//
// An object of many keys spends its time here: a loop of a few variables,
// which the hash can call out of without making the scan's loops (skimHot,
// scan) keep their state in memory. It is one function over the ~90-line
// rule: the table's probe in a method of its own, and the unsigned
// integers in plainValue, cost 85 instructions a key more (~15%,
// BenchmarkParseThroughput/many_keys_*, jsonrpc/).
func tableMembers[O offset](b []byte, i, tab int, s *Schema, node uint8, st *keyState[O], intDigits *int) memberRun {
	var (
		r memberRun
		t = &st.tables
		// The table (t.slots[tab-1:]), probed here: the keys it holds
		// without growing (room), its slots and their count, the keys it
		// holds, and the work to add to t.work. In one
		// struct, kept in memory (a struct of more than four fields is):
		// the registers the loop's variables took were all saved and
		// restored around the hash's call, a key at a time.
		tv struct {
			fits  int
			slots []slot[O]
			size  uint64
			keys  int
			work  int
		}
	)
	tv.keys = t.keys()
	defer func() { t.work, t.held[len(t.held)-1] = t.work+tv.work, tv.keys }()
	for {
		r.i, r.where = i, atKey
		if i >= len(b) || b[i] != '"' {
			r.where = atInvalid
			return r
		}
		ks := i + 1
		ke := plainString(b, ks) - 1
		if ke < 0 {
			return r
		}
		key := b[ks:ke]
		if tv.keys+1 > tv.fits {
			t.held[len(t.held)-1] = tv.keys
			t.room(tab-1, len(b)-i)
			tv.slots = t.slots[tab-1:]
			tv.fits, tv.size = 3*len(tv.slots)/4, uint64(len(tv.slots))
		}
		// As keyTables.add, or for an object of the Schema foldSlot and
		// foldDuplicate: a class of keys keeps its first one.
		h := key
		if node != 0 {
			t.fold = appendFolded(t.fold[:0], key)
			h = t.fold
		}
		tag := keyHash(h)
		for p := home(tag, tv.size); ; p = next(p, tv.size) {
			tv.work++
			sl := tv.slots[p]
			if sl.ref == 0 {
				tv.slots[p] = slot[O]{O(ks), tag}
				tv.keys++
				break
			}
			if sl.tag != tag {
				continue
			}
			tv.work++
			prev := t.keyOf(sl.ref, b)
			if string(prev) == string(key) {
				r.where, r.dup = atDup, key
				return r
			}
			if node != 0 && bytes.EqualFold(prev, key) {
				r.fold = true
				break
			}
		}
		r.slot, r.child = -1, 0
		if node != 0 {
			r.slot, r.child = s.member(node, key)
		}
		if i = skipSpace(b, ke+1); i >= len(b) || b[i] != ':' {
			r.i, r.where = i, atInvalid
			return r
		}
		i = skipSpace(b, i+1)
		r.i, r.where = i, atValue
		if r.slot >= 0 || r.child != 0 || i >= len(b) {
			return r
		}
		end := i + 1
		if c := b[i]; c-'0' < 10 {
			// An unsigned integer here, the common case (a leading
			// zero, "01", ends at the zero: what follows is not ',').
			if c != '0' {
				for end < len(b) && b[end]-'0' < 10 {
					end++
				}
			}
			if end < len(b) && (b[end] == '.' || b[end]|0x20 == 'e') {
				end = -1
			} else {
				*intDigits = max(*intDigits, end-i)
			}
		} else {
			end = -1
		}
		if end < 0 {
			var digits int
			if end, digits = plainValue(b, i); end < 0 {
				return r
			}
			*intDigits = max(*intDigits, digits)
		}
		if i = skipSpace(b, end); i >= len(b) || b[i] != ',' {
			r.i, r.where = i, atNext
			return r
		}
		i = skipSpace(b, i+1)
	}
}

// plainValue reads the value at b[i:] when it is plain: a string plainString
// reads, a literal, a number without exponent (plainNumber). It returns the
// index after it and, for an integer, its digits; -1 when it is not plain
// (or not a value).
func plainValue(b []byte, i int) (end, digits int) {
	if i >= len(b) {
		return -1, 0
	}
	switch c := b[i]; c {
	case '"':
		if end = plainString(b, i+1); end == 0 {
			return -1, 0
		}
		return end, 0
	case 't', 'n':
		w := wordTrue
		if c == 'n' {
			w = wordNull
		}
		if i+4 > len(b) || binary.LittleEndian.Uint32(b[i:]) != w {
			return -1, 0
		}
		return i + 4, 0
	case 'f':
		if i+5 > len(b) || binary.LittleEndian.Uint32(b[i+1:]) != wordAlse {
			return -1, 0
		}
		return i + 5, 0
	}
	return plainNumber(b, i)
}

// plainNumber reads a number without exponent at b[i:] ([-] (0 | [1-9]
// [0-9]*) [. [0-9]+]) and returns the index after it and the digits of its
// integer part (0 with a fraction), or -1 when b[i:] does not start with
// one or it goes on with an exponent (number reads those).
func plainNumber(b []byte, i int) (int, int) {
	j := i
	if b[j] == '-' {
		j++
	}
	if j >= len(b) || b[j]-'0' >= 10 {
		return -1, 0
	}
	if j++; b[j-1] != '0' {
		for j < len(b) && b[j]-'0' < 10 {
			j++
		}
	}
	digits := j - i
	if b[i] == '-' {
		digits--
	}
	if j < len(b) && b[j] == '.' {
		if j++; j >= len(b) || b[j]-'0' >= 10 {
			return -1, 0
		}
		for j < len(b) && b[j]-'0' < 10 {
			j++
		}
		digits = 0
	}
	if j < len(b) && b[j]|0x20 == 'e' {
		return -1, 0
	}
	return j, digits
}
