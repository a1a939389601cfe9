// Skipping member values for HashCanonicalRaw without walking deep objects
// once per level.

package strictjson

import (
	"cmp"
	"slices"
)

// keepAfter is how many levels of member values a skip walks under a
// member value before it keeps where that value ends (see skip).
const keepAfter = 5

// keepAbove is the length from which a member value under the one a skip
// walks is kept whatever its height (see skip); a variable for the tests.
var keepAbove = 64 << 10

// valueEnd is where a member value kept by skip starts and ends in the text.
type valueEnd struct{ start, end int }

// skipFrame is a container open in a walk of skip: where it starts, whether
// it is an object and whether it is a member value, and the height of the
// member values under it that skip walked and did not keep (see skip).
type skipFrame struct {
	start          int
	height         int32
	object, member bool
}

// skip returns the index after the value starting at b[i], a member value
// of an object that rawObjectOf is collecting, in valid JSON; it adds to
// e.walked the bytes it read.
//
// Each object of HashCanonicalRaw skips its member values to find its next
// key, then writes them; a nested object skips its own member values again.
// Walking every value in full, a byte n objects deep was read n times (350
// ms for a 14 MiB input 63 objects deep, against 9 ms for Check). So a walk
// keeps, in e.ends, where the member values under it end (not the one it
// skips: no later walk meets it) that have at least keepAfter levels of
// member values under them that it walked and did not keep (their height),
// or are at least keepAbove bytes long, and skips a kept value at once (a
// binary search of e.ends, sorted by start; see sortEnds). A kept value
// counts for no level in its parent's height.
//
// Work: a byte is read by the walk that first meets it (the one of the
// outermost object above it), then by the walks of at most keepAfter
// member values above it (those below the nearest kept one, or below the
// one the first walk skipped), then once more if it is in a string member
// value (its object skips it): at most keepAfter+2 = 7 reads a byte in all
// skips, plus the writing pass, and a binary search per member value that
// is a container. A long value deep down (the usual deep document) is read
// 3 times: its containers of keepAbove bytes or more are kept.
//
// Memory: e.ends, 16 bytes a kept value. A value kept for its height has
// keepAfter levels of member values in it that it holds alone (no other
// kept value holds them), each at least 5 bytes of text outside the next
// ({"":…}), so at most one is kept for 25 bytes of text, 0.64 bytes a byte;
// the values kept for their length, at most one a keepAbove bytes on each
// of the MaxDepth levels, add at most 0.02 (the slice's growth aside). An
// ordinary document (less than keepAfter+2 objects deep, with no member
// value of keepAbove bytes inside another) keeps none. The frames of a walk
// are in e.frames (e.deeper past MaxDepth levels).
func (e *canonEncoder) skip(b []byte, i int) int {
	if c := b[i]; c != '{' && c != '[' {
		end := skipValue(b, i)
		e.walked += end - i
		return end
	}
	if end, ok := e.keptEnd(i); ok {
		return end
	}
	start, jumped := i, 0
	*e.frame(0) = skipFrame{start: i, object: b[i] == '{'}
	d := 0 // the frame of the innermost open container
	for i++; i < len(b); i++ {
		switch b[i] {
		case '"':
			end, _, _, _ := str(b, i)
			i = end - 1
		case '{', '[':
			member := e.frame(d).object
			if member {
				if end, ok := e.keptEnd(i); ok {
					jumped += end - i
					i = end - 1
					continue
				}
			}
			d++
			*e.frame(d) = skipFrame{start: i, object: b[i] == '{', member: member}
		case '}', ']':
			if d == 0 {
				e.walked += i + 1 - start - jumped
				return i + 1
			}
			f := e.frame(d)
			h := f.height
			if f.member {
				if h >= keepAfter || i+1-f.start >= keepAbove {
					e.ends = append(e.ends, valueEnd{f.start, i + 1})
					h = 0
				} else {
					h++
				}
			}
			d--
			if p := e.frame(d); h > p.height {
				p.height = h
			}
		}
	}
	e.walked += len(b) - start - jumped
	return len(b)
}

// frame returns the frame of skip's walk d levels under the value it skips.
func (e *canonEncoder) frame(d int) *skipFrame {
	if d < len(e.frames) {
		return &e.frames[d]
	}
	for d-len(e.frames) >= len(e.deeper) {
		e.deeper = append(e.deeper, skipFrame{})
	}
	return &e.deeper[d-len(e.frames)]
}

// keptEnd returns where the member value starting at b[i] ends when a walk
// of skip kept it.
func (e *canonEncoder) keptEnd(i int) (int, bool) {
	if e.sorted == 0 {
		return 0, false
	}
	k, ok := slices.BinarySearchFunc(e.ends[:e.sorted], i, func(v valueEnd, i int) int {
		return cmp.Compare(v.start, i)
	})
	if !ok {
		return 0, false
	}
	return e.ends[k].end, true
}

// sortEnds sorts the values kept since the last call by where they start
// (a walk keeps them as they end, the inner ones first). Only the walks of
// an object outside every member value keep values (under another member
// value they were all met, and kept, by its walk), and these objects are
// written one after the other in the text, so the new values all come
// after the sorted ones; the whole is sorted again if they do not.
func (e *canonEncoder) sortEnds() {
	if e.sorted == len(e.ends) {
		return
	}
	byStart := func(x, y valueEnd) int { return cmp.Compare(x.start, y.start) }
	slices.SortFunc(e.ends[e.sorted:], byStart)
	if e.sorted > 0 && e.ends[e.sorted-1].start > e.ends[e.sorted].start {
		slices.SortFunc(e.ends, byStart)
	}
	e.sorted = len(e.ends)
}
