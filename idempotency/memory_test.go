package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestMemoryEntryBoundNeverEvictsLiveRecords: a full store refuses new keys
// (fail closed) instead of evicting a live record, which would let that key
// execute again (a caller of one workspace could flush another's records).
func TestMemoryEntryBoundNeverEvictsLiveRecords(t *testing.T) {
	f := loadFixture(t)
	st := NewMemoryStore(MemoryOptions{MaxEntries: 3, MaxEntriesPerGroup: 3})
	a := newAgent(f.Result)
	g := New(st, Options{})
	for i := 1; i <= 3; i++ {
		req := withKey(f.request(t, `1`), "k"+itoa(i))
		mustDo(t, g, req, a.forward(req))
	}
	req4 := withKey(f.request(t, `1`), "k4")
	if _, err := g.Do(context.Background(), req4, a.forward(req4)); codeOf(err) != CodeStoreUnavailable || !errors.Is(err, ErrStoreFull) {
		t.Fatalf("Do on a full store: %v", err)
	}
	if a.count() != 3 {
		t.Fatalf("forwards = %d, want 3 (nothing forwarded when full)", a.count())
	}
	for i := 1; i <= 3; i++ {
		req := withKey(f.request(t, `2`), "k"+itoa(i))
		if !mustDo(t, g, req, a.forward(req)).Replayed {
			t.Fatalf("k%d was evicted", i)
		}
	}
}

func TestMemoryNeverEvictsInFlightMarks(t *testing.T) {
	f := loadFixture(t)
	st := NewMemoryStore(MemoryOptions{MaxEntries: 2, MaxEntriesPerGroup: 2})
	ctx := context.Background()
	a := newAgent(f.Result)
	g := New(st, Options{})

	m1, err := st.Claim(ctx, "mark1", time.Hour)
	if err != nil || m1.State != StateClaimed {
		t.Fatalf("%+v %v", m1, err)
	}
	m2, err := st.Claim(ctx, "mark2", time.Hour)
	if err != nil || m2.State != StateClaimed {
		t.Fatalf("%+v %v", m2, err)
	}
	// Full of live marks: refused, with a store error, and Do fails closed.
	if _, err := st.Claim(ctx, "mark3", time.Hour); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("claim when full: %v", err)
	}
	req := withKey(f.request(t, `1`), "new")
	_, err = g.Do(ctx, req, a.forward(req))
	if codeOf(err) != CodeStoreUnavailable || !errors.Is(err, ErrStoreFull) {
		t.Fatalf("Do when full: %v", err)
	}
	if a.count() != 0 {
		t.Fatalf("forwarded while full: %d", a.count())
	}
	for _, id := range []string{"mark1", "mark2"} {
		if c, _ := st.Claim(ctx, id, time.Hour); c.State != StateInFlight {
			t.Fatalf("%s: %v", id, c.State)
		}
	}
	// Releasing one frees a slot.
	if err := st.Release(ctx, "mark1", m1.Token); err != nil {
		t.Fatal(err)
	}
	if rep := mustDo(t, g, req, a.forward(req)); rep.Replayed {
		t.Fatal("unexpected replay")
	}
}

func TestMemoryExpiredMarksDoNotFillTheStore(t *testing.T) {
	st := NewMemoryStore(MemoryOptions{MaxEntries: 2, MaxEntriesPerGroup: 2})
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := st.Claim(ctx, id, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "expired marks to be purged on a full claim", func() bool {
		c, err := st.Claim(ctx, "c", time.Hour)
		return err == nil && c.State == StateClaimed
	})
}

// TestMemoryByteBound: once the kept records reach MaxBytes new keys are
// refused; a record of a call already forwarded is kept even past the bound
// (dropping it would let the call run again); nothing live is evicted.
func TestMemoryByteBound(t *testing.T) {
	ctx := context.Background()
	mk := func(n int) Record {
		return Record{Fingerprint: "fp", Status: 200, Result: json.RawMessage(`{"p":"` + strings.Repeat("x", n) + `"}`)}
	}
	one := mk(1000)
	size := one.size() + int64(len("id-0"))
	st := NewMemoryStore(MemoryOptions{MaxBytes: 3*size + size/2, MaxBytesPerGroup: 4 * size})
	for i := 0; i < 4; i++ { // the 4th claim is allowed (3 sizes < bound); its record overshoots
		id := "id-" + itoa(i)
		c, err := st.Claim(ctx, id, time.Hour)
		if err != nil {
			t.Fatalf("claim %s: %v", id, err)
		}
		if err := st.Record(ctx, id, c.Token, one, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if recs, _ := st.Len(); recs != 4 {
		t.Fatalf("records = %d, want 4 (none evicted)", recs)
	}
	if _, err := st.Claim(ctx, "id-4", time.Hour); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("claim over the byte bound: %v", err)
	}
	for _, id := range []string{"id-0", "id-3"} {
		if c, err := st.Claim(ctx, id, time.Hour); err != nil || c.State != StateRecorded {
			t.Fatalf("%s: %v %v", id, c.State, err)
		}
	}

	st = NewMemoryStore(MemoryOptions{MaxBytes: 3*size + size/2, MaxBytesPerGroup: 4 * size})
	// A record larger than the bound is refused; the mark stays for the
	// caller to release.
	c, _ := st.Claim(ctx, "huge", time.Hour)
	if err := st.Record(ctx, "huge", c.Token, mk(int(4*size)), time.Hour); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("huge record: %v", err)
	}
	if err := st.Release(ctx, "huge", c.Token); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryTooLargeAnswerStillReturned(t *testing.T) {
	f := loadFixture(t)
	st := NewMemoryStore(MemoryOptions{MaxBytes: 64})
	c := newCounters()
	g := New(st, Options{Observer: c.observer()})
	a := newAgent(f.Result)
	req := f.request(t, `1`)
	rep := mustDo(t, g, req, a.forward(req))
	if rep.Replayed || rep.Status != 200 || !strings.Contains(string(rep.Body), `"strictly_idempotent_response":true`) {
		t.Fatalf("%+v", rep)
	}
	errs := c.errs()
	if len(errs) != 1 || errs[0].op != "record" || !errors.Is(errs[0].err, ErrRecordTooLarge) {
		t.Fatalf("store errors: %v", errs)
	}
	// Kept in flight: the call ran, so a retry must not run it again; it
	// waits and then gets idempotency_in_progress (issue 12, "Recording
	// fails after success").
	impatient := New(st, Options{WaitTimeout: 50 * time.Millisecond})
	_, err := impatient.Do(context.Background(), req, a.forward(req))
	if codeOf(err) != CodeInProgress || a.count() != 1 {
		t.Fatalf("retry: %v, forwards=%d", err, a.count())
	}
	if c.kept.Load() != 1 {
		t.Fatalf("Kept = %d, want 1", c.kept.Load())
	}
}

func TestMemoryCloseWakesWaiters(t *testing.T) {
	st := NewMemoryStore(MemoryOptions{})
	ctx := context.Background()
	if _, err := st.Claim(ctx, "id", time.Hour); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Wait(ctx, "id") }()
	_ = st.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(patience):
		t.Fatal("waiter not woken by Close")
	}
	if _, err := st.Claim(ctx, "id", time.Hour); !errors.Is(err, ErrClosed) {
		t.Fatalf("Claim after Close: %v", err)
	}
	if err := st.Ping(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ping after Close: %v", err)
	}
	f := loadFixture(t)
	a := newAgent(f.Result)
	g := New(st, Options{})
	req := f.request(t, `1`)
	if _, err := g.Do(ctx, req, a.forward(req)); codeOf(err) != CodeStoreUnavailable || a.count() != 0 {
		t.Fatalf("Do on a closed store: %v", err)
	}
}

// TestMemoryPerWorkspaceBound: one workspace cannot take more than its share
// of the store; another workspace's confirms keep working.
func TestMemoryPerWorkspaceBound(t *testing.T) {
	f := loadFixture(t)
	st := NewMemoryStore(MemoryOptions{MaxEntries: 16}) // 2 per workspace by default (16/8)
	a := newAgent(f.Result)
	g := New(st, Options{})
	inWorkspace := func(ws, key string) Request {
		req := withKey(f.request(t, `1`), key)
		req.Key.WorkspaceID = ws
		return req
	}
	for _, k := range []string{"a1", "a2"} {
		req := inWorkspace("wsA", k)
		mustDo(t, g, req, a.forward(req))
	}
	reqA3 := inWorkspace("wsA", "a3")
	if _, err := g.Do(context.Background(), reqA3, a.forward(reqA3)); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("a third key of wsA: %v", err)
	}
	for _, k := range []string{"b1", "b2"} {
		req := inWorkspace("wsB", k)
		if rep := mustDo(t, g, req, a.forward(req)); rep.Replayed {
			t.Fatalf("wsB %s replayed", k)
		}
	}
	// wsA's records still replay (nothing was evicted).
	req := inWorkspace("wsA", "a1")
	if !mustDo(t, g, req, a.forward(req)).Replayed {
		t.Fatal("wsA's record lost")
	}
	if a.count() != 4 {
		t.Fatalf("forwards = %d, want 4", a.count())
	}
}
