// How the slices that grow with a document grow.

package strictjson

// reserve returns s with room for n more elements, doubling its capacity
// when it must grow: append grows a large slice by about a quarter, which
// allocates about five times its final size in all while it grows. Every
// slice that grows with the document (the keys of the open objects, the
// unescaped keys, the members of an object being written) grows through
// it, so that what a body of millions of keys leaves behind is about twice
// what it holds at the end. (The key tables double too, but to no more
// than the rest of the document can fill: keyTables.room.)
func reserve[T any](s []T, n int) []T {
	if len(s)+n <= cap(s) {
		return s
	}
	return append(make([]T, 0, max(2*cap(s), len(s)+n)), s...)
}
