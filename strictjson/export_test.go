package strictjson

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
