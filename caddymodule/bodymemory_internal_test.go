package caddymodule

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestBodyMemoryFitsOneMaxBody: a body of max_body_a2a bytes fits a budget
// of max_body_a2a (the smallest the validation accepts), declared or not,
// and the budget is whole again once it is released; a second body does
// not fit while the first is held.
func TestBodyMemoryFitsOneMaxBody(t *testing.T) {
	const limit = 64 << 10
	g := &gate{maxBodyA2A: limit, bodyTimeout: time.Minute}
	saved := bodyMemory
	bodyMemory = &bodyBudget{capacity: limit, gates: map[*gate]int64{}}
	t.Cleanup(func() { bodyMemory = saved })
	for _, declared := range []int64{limit, -1} {
		data := bytes.Repeat([]byte("a"), limit)
		r := httptest.NewRequest(http.MethodPost, "/a2a", bytes.NewReader(data))
		r.ContentLength = declared
		got, held, status := g.readBody(httptest.NewRecorder(), r, limit)
		if status != 0 || !bytes.Equal(got, data) {
			t.Fatalf("declared %d: status %d, %d bytes", declared, status, len(got))
		}
		if held > limit || bodyMemory.inUse() != held {
			t.Fatalf("declared %d: held %d, in use %d", declared, held, bodyMemory.inUse())
		}
		r2 := httptest.NewRequest(http.MethodPost, "/a2a", bytes.NewReader([]byte("{}")))
		if _, _, status := g.readBody(httptest.NewRecorder(), r2, limit); status != http.StatusServiceUnavailable {
			t.Fatalf("declared %d: a second body while the first is held: status %d, want 503", declared, status)
		}
		bodyMemory.release(held)
		if bodyMemory.inUse() != 0 {
			t.Fatalf("declared %d: %d bytes still in use", declared, bodyMemory.inUse())
		}
	}
}
