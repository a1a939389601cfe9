package strictjson_test

import (
	"crypto/sha256"
	"runtime"
	"strconv"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// manyKeysObject returns {"k0000000":0,"k0000001":0,…}, an object of n
// short keys (n < 10^7), the shape of a key-heavy body.
func manyKeysObject(n int) []byte {
	b := make([]byte, 0, n*12+2)
	b = append(b, '{')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `"k`...)
		s := strconv.Itoa(i)
		for range 7 - len(s) {
			b = append(b, '0')
		}
		b = append(b, s...)
		b = append(b, `":0`...)
	}
	return append(b, '}')
}

// reportBytesPerKey runs f b.N times and reports the bytes it allocated per
// key of an object of keys keys (B/key): what a key-heavy body costs beside
// its own bytes.
func reportBytesPerKey(b *testing.B, keys int, f func()) {
	b.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := 0
	for b.Loop() {
		f()
		n++
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n)/float64(keys), "B/key")
}

// BenchmarkScanManyKeys: Scan of a 1 M-key object, checked only (plain) and
// as an object a Schema reads (schema: keys compared under case folding).
func BenchmarkScanManyKeys(b *testing.B) {
	const keys = 1_000_000
	obj := manyKeysObject(keys)
	read := append(append([]byte(`{"b":`), obj...), '}')
	schema := strictjson.NewSchema([]string{"b.c"})
	spans := make([]strictjson.Span, schema.Len())
	b.Run("plain", func(b *testing.B) {
		b.SetBytes(int64(len(obj)))
		reportBytesPerKey(b, keys, func() {
			if f := strictjson.Scan(obj, strictjson.MaxDepth, nil, nil); !f.OK() {
				b.Fatalf("%+v", f)
			}
		})
	})
	b.Run("schema", func(b *testing.B) {
		b.SetBytes(int64(len(read)))
		reportBytesPerKey(b, keys, func() {
			if f := strictjson.Scan(read, strictjson.MaxDepth, schema, spans); !f.OK() {
				b.Fatalf("%+v", f)
			}
		})
	})
}

// BenchmarkHashCanonicalRawManyKeys: the canonical hash of a 1 M-key object
// (the idempotency fingerprint's second pass over a key-heavy body).
func BenchmarkHashCanonicalRawManyKeys(b *testing.B) {
	const keys = 1_000_000
	obj := manyKeysObject(keys)
	h := sha256.New()
	b.SetBytes(int64(len(obj)))
	reportBytesPerKey(b, keys, func() {
		h.Reset()
		strictjson.HashCanonicalRaw(h, obj)
	})
}
