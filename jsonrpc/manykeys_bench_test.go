package jsonrpc

import (
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkParseManyKeys: Parse of an /a2a body whose params hold 1 M extra
// short keys ("k0000000":0,…): params is an object the schema reads, so its
// keys are compared under case folding. B/key is what the scan allocates per
// key beside the body.
func BenchmarkParseManyKeys(b *testing.B) {
	const keys = 1_000_000
	body := make([]byte, 0, keys*12+100)
	body = append(body, `{"jsonrpc":"2.0","id":7,"method":"supervaizer/job.sync","params":{`...)
	for i := range keys {
		body = append(body, `"k`...)
		s := strconv.Itoa(i)
		for range 7 - len(s) {
			body = append(body, '0')
		}
		body = append(body, s...)
		body = append(body, `":0,`...)
	}
	body = append(body, `"z":0}}`...)
	var f fields
	if facts := scan(body, &f); !facts.OK() {
		b.Fatalf("scan: %+v", facts)
	}
	b.SetBytes(int64(len(body)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := 0
	for b.Loop() {
		Parse(body)
		n++
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n)/keys, "B/key")
}
