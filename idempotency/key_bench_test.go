package idempotency

import (
	"bytes"
	"strconv"
	"testing"
)

// BenchmarkFingerprintManyValues: the fingerprint of a 1 MiB input of small
// values (an array of numbers, an object of short keys): B/op is what the
// fingerprint holds beside the body (make bench-go; the memory a covered
// call costs above body_memory's charge).
func BenchmarkFingerprintManyValues(b *testing.B) {
	var arr, obj bytes.Buffer
	arr.WriteString(`{"a":[`)
	obj.WriteString(`{"o":{`)
	for i := 0; arr.Len() < 1<<20; i++ {
		if i > 0 {
			arr.WriteByte(',')
			obj.WriteByte(',')
		}
		arr.WriteString("1")
		obj.WriteString(`"k` + strconv.Itoa(i) + `":1`)
	}
	arr.WriteString(`]}`)
	obj.WriteString(`}}`)
	for _, c := range []struct {
		name string
		in   []byte
	}{{"array", arr.Bytes()}, {"object", obj.Bytes()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.in)))
			for b.Loop() {
				if _, err := FingerprintIdentities("m", "j", true, c.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
