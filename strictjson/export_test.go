package strictjson

import "hash"

// ManyKeys is manyKeys, for the tests of the key tables.
const ManyKeys = manyKeys

// SetWideAbove sets the length past which Scan keeps 64-bit offsets (-1:
// every document) and returns the function that restores it.
func SetWideAbove(n int) (restore func()) {
	old := wideAbove
	wideAbove = n
	return func() { wideAbove = old }
}

// SetHashMask sets the mask of the key tables' hashes (0: every key collides
// with every other) and returns the function that restores it.
func SetHashMask(m uint64) (restore func()) {
	old := hashMask
	hashMask = m
	return func() { hashMask = old }
}

// HashCanonicalRawCost is HashCanonicalRaw; it returns the bytes read to
// skip the objects' member values (all reads but the writing pass's) and
// how many member values it kept the ends of.
func HashCanonicalRawCost(h hash.Hash, raw []byte) (walked, kept int) {
	return hashCanonicalRaw(h, raw)
}

// SetKeepAbove sets the length from which HashCanonicalRaw keeps the end of
// a member value whatever its height and returns the function that
// restores it.
func SetKeepAbove(n int) (restore func()) {
	old := keepAbove
	keepAbove = n
	return func() { keepAbove = old }
}

// ScanWork is Scan; it also returns the work of finding duplicate keys:
// the probes and key comparisons (keyTables.work).
func ScanWork(b []byte, s *Schema, spans []Span) (f Facts, work int) {
	old := workHook
	workHook = func(w int) { work = w }
	defer func() { workHook = old }()
	return Scan(b, MaxDepth, s, spans), work
}
