package strictjson_test

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// deepObject returns {"a":{"a":…{"a":"xxx…"}…}}, depth objects nested in
// one another around one string, size bytes in all: the shape whose bytes
// are all depth objects deep.
func deepObject(depth, size int) []byte {
	open, close := strings.Repeat(`{"a":`, depth), strings.Repeat("}", depth)
	pad := size - len(open) - len(close) - 2
	return []byte(open + `"` + strings.Repeat("x", pad) + `"` + close)
}

// BenchmarkHashCanonicalRawDeep: the canonical hash of a 14 MiB input
// nested 63 objects deep (MaxDepth 64 with the request around it).
func BenchmarkHashCanonicalRawDeep(b *testing.B) {
	raw := deepObject(63, 14<<20)
	if err := strictjson.Check(raw, strictjson.MaxDepth); err != nil {
		b.Fatal(err)
	}
	h := sha256.New()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		h.Reset()
		strictjson.HashCanonicalRaw(h, raw)
	}
}
