package gate

import (
	"bytes"
	"errors"
	"io"
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
	g := &Gate{MaxBodyA2A: limit, BodyTimeout: time.Minute}
	saved := BodyMemory
	BodyMemory = &bodyBudget{capacity: limit, gates: map[*Gate]int64{}}
	t.Cleanup(func() { BodyMemory = saved })
	for _, declared := range []int64{limit, -1} {
		data := bytes.Repeat([]byte("a"), limit)
		r := httptest.NewRequest(http.MethodPost, "/a2a", bytes.NewReader(data))
		r.ContentLength = declared
		got, held, status := g.readBody(httptest.NewRecorder(), r, limit)
		if status != 0 || !bytes.Equal(got, data) {
			t.Fatalf("declared %d: status %d, %d bytes", declared, status, len(got))
		}
		if held > limit || BodyMemory.inUse() != held {
			t.Fatalf("declared %d: held %d, in use %d", declared, held, BodyMemory.inUse())
		}
		r2 := httptest.NewRequest(http.MethodPost, "/a2a", bytes.NewReader([]byte("{}")))
		if _, _, status := g.readBody(httptest.NewRecorder(), r2, limit); status != http.StatusServiceUnavailable {
			t.Fatalf("declared %d: a second body while the first is held: status %d, want 503", declared, status)
		}
		BodyMemory.release(held)
		if BodyMemory.inUse() != 0 {
			t.Fatalf("declared %d: %d bytes still in use", declared, BodyMemory.inUse())
		}
	}
}

// TestBodyMemoryChargedAsBytesArrive: a body that declares max_body_a2a
// bytes and sends one holds at most bodyPresize of the budget (not the
// declared length), so a few such connections cannot refuse every other
// call; a small call still fits beside it, and the budget is whole again
// once the held body fails.
func TestBodyMemoryChargedAsBytesArrive(t *testing.T) {
	const limit = 16 << 20
	g := &Gate{MaxBodyA2A: limit, BodyTimeout: time.Minute}
	saved := BodyMemory
	BodyMemory = &bodyBudget{capacity: limit, gates: map[*Gate]int64{}}
	t.Cleanup(func() { BodyMemory = saved })
	pr, pw := io.Pipe()
	r := httptest.NewRequest(http.MethodPost, "/a2a", pr)
	r.ContentLength = limit - 1
	done := make(chan int)
	go func() {
		_, held, status := g.readBody(httptest.NewRecorder(), r, limit)
		BodyMemory.release(held)
		done <- status
	}()
	if _, err := pw.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	// The one byte was read (the pipe's Write returned): the reservation
	// is what the buffer holding it costs.
	if used := BodyMemory.inUse(); used == 0 || used > bodyPresize {
		t.Fatalf("one byte of a declared %d held %d bytes of the budget, want 1..%d", limit-1, used, bodyPresize)
	}
	small := httptest.NewRequest(http.MethodPost, "/a2a", bytes.NewReader([]byte("{}")))
	body, held, status := g.readBody(httptest.NewRecorder(), small, limit)
	if status != 0 || string(body) != "{}" {
		t.Fatalf("a small call beside the held one: status %d", status)
	}
	BodyMemory.release(held)
	pw.CloseWithError(errors.New("client gone"))
	if status := <-done; status != http.StatusBadRequest {
		t.Fatalf("the held body: status %d, want 400", status)
	}
	if used := BodyMemory.inUse(); used != 0 {
		t.Fatalf("%d bytes still in use", used)
	}
}
