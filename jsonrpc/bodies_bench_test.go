package jsonrpc

import (
	"strconv"
	"strings"
	"testing"
)

// The bodies of the throughput benchmarks: the fixture's job.start with an
// input of rows (the shape of a large call: an array of small objects of
// strings, numbers and booleans), and the key-heavy worst case.

// rowsInput returns an input object {"campaign_id":"campaign_123","rows":
// [{...},…]} of at least size bytes.
func rowsInput(size int) []byte {
	b := make([]byte, 0, size+256)
	b = append(b, `{"campaign_id":"campaign_123","rows":[`...)
	for i := 0; len(b) < size; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		n := strconv.Itoa(i)
		b = append(b, `{"id":`...)
		b = append(b, n...)
		b = append(b, `,"name":"Contact number `...)
		b = append(b, n...)
		b = append(b, `","email":"contact.`...)
		b = append(b, n...)
		b = append(b, `@example.com","score":12.75,"active":true,"tags":["lead","q3"],"note":null}`...)
	}
	return append(b, "]}"...)
}

// manyKeysInput returns an object of short distinct keys ("k0000000":0,…)
// of at least size bytes.
func manyKeysInput(size int) []byte {
	b := make([]byte, 0, size+16)
	b = append(b, '{')
	for i := 0; len(b) < size; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `"k`...)
		s := strconv.Itoa(i)
		b = append(b, strings.Repeat("0", max(7-len(s), 0))...)
		b = append(b, s...)
		b = append(b, `":0`...)
	}
	return append(b, '}')
}

// jobStartWithInput is the fixture's job.start envelope (compact, as
// Studio sends it) with input as its input.
func jobStartWithInput(input []byte) []byte {
	return []byte(`{"jsonrpc":"2.0","id":7,"method":"supervaizer/action.invoke","params":{"action_request":` +
		`{"request_id":"req_start_123","idempotency_key":"idem_start_campaign_123","actor":{"user_id":"user_123"},` +
		`"workspace":{"id":"workspace_123","slug":"acme"},"mission_id":"mission_123","agent_slug":"agent_interviewer",` +
		`"draft_session_id":"draft_123","job_id":"job_123","surface":"job.start","action":"job.start","input":` +
		string(input) + `}}}`)
}

// manyKeysParams is a job.sync envelope whose params (an object Parse reads,
// so its keys are compared under case folding too) hold the many keys of
// manyKeysInput(size) besides the request's members.
func manyKeysParams(size int) []byte {
	keys := manyKeysInput(size)
	return []byte(`{"jsonrpc":"2.0","id":7,"method":"supervaizer/action.invoke","params":{` +
		`"request_id":"req_1","actor":{"user_id":"user_123"},"workspace":{"id":"workspace_123"},` +
		`"mission_id":"mission_123","agent_slug":"agent_interviewer","surface":"job.sync","action":"job.sync",` +
		string(keys[1:len(keys)-1]) + `}}`)
}

// BenchmarkParseThroughput is Parse's MB/s on large bodies (make bench-go):
// the fixture's job.start with an input of rows of 64 KiB and 1 MiB, and the
// many-keys worst case, 1 MiB of distinct short keys in input (an object
// only checked) and in params (an object Parse reads: keys compared under
// case folding too). Target (issue 34): >= 1 GB/s for the rows, >= 200 MB/s
// for many keys.
func BenchmarkParseThroughput(b *testing.B) {
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"job_start_64KiB", jobStartWithInput(rowsInput(64 << 10))},
		{"rows_1MiB", jobStartWithInput(rowsInput(1 << 20))},
		{"many_keys_input_1MiB", jobStartWithInput(manyKeysInput(1 << 20))},
		{"many_keys_params_1MiB", manyKeysParams(1 << 20)},
	} {
		if _, err := Parse(c.body); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(c.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
