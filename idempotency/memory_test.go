package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestMemoryEntryBoundEvictsOldestRecord(t *testing.T) {
	f := loadFixture(t)
	st := NewMemoryStore(MemoryOptions{MaxEntries: 3})
	a := newAgent(f.Result)
	g := New(st, Options{})
	for i := 1; i <= 3; i++ {
		req := withKey(f.request(t, `1`), "k"+itoa(i))
		mustDo(t, g, req, a.forward(req))
	}
	if recs, marks := st.Len(); recs != 3 || marks != 0 {
		t.Fatalf("len = %d records, %d marks", recs, marks)
	}
	req4 := withKey(f.request(t, `1`), "k4")
	mustDo(t, g, req4, a.forward(req4))
	if recs, _ := st.Len(); recs != 3 {
		t.Fatalf("records = %d, want 3", recs)
	}
	// k1 (oldest) was evicted, k2..k4 still replay.
	for i := 2; i <= 4; i++ {
		req := withKey(f.request(t, `2`), "k"+itoa(i))
		if !mustDo(t, g, req, a.forward(req)).Replayed {
			t.Fatalf("k%d evicted", i)
		}
	}
	if a.count() != 4 {
		t.Fatalf("forwards = %d", a.count())
	}
	req1 := withKey(f.request(t, `2`), "k1")
	if mustDo(t, g, req1, a.forward(req1)).Replayed {
		t.Fatal("k1 should have been evicted")
	}
}

func TestMemoryNeverEvictsInFlightMarks(t *testing.T) {
	f := loadFixture(t)
	st := NewMemoryStore(MemoryOptions{MaxEntries: 2})
	ctx := context.Background()
	a := newAgent(f.Result)
	g := New(st, Options{})

	// One record and one mark: a new claim evicts the record.
	reqR := withKey(f.request(t, `1`), "recorded")
	mustDo(t, g, reqR, a.forward(reqR))
	m1, err := st.Claim(ctx, "mark1", time.Hour)
	if err != nil || m1.State != StateClaimed {
		t.Fatalf("%+v %v", m1, err)
	}
	m2, err := st.Claim(ctx, "mark2", time.Hour)
	if err != nil || m2.State != StateClaimed {
		t.Fatalf("claim evicting a record: %+v %v", m2, err)
	}
	if recs, marks := st.Len(); recs != 0 || marks != 2 {
		t.Fatalf("len = %d records, %d marks", recs, marks)
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
	if a.count() != 1 {
		t.Fatalf("forwarded while full: %d", a.count())
	}
	// Both marks still hold.
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
	st := NewMemoryStore(MemoryOptions{MaxEntries: 2})
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

func TestMemoryByteBound(t *testing.T) {
	ctx := context.Background()
	mk := func(n int) Record {
		return Record{Fingerprint: "fp", Status: 200, Result: json.RawMessage(`{"p":"` + strings.Repeat("x", n) + `"}`)}
	}
	one := mk(1000)
	size := one.size() + int64(len("id-0"))
	st := NewMemoryStore(MemoryOptions{MaxBytes: 3*size + size/2})
	for i := 0; i < 5; i++ {
		id := "id-" + itoa(i)
		c, err := st.Claim(ctx, id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Record(ctx, id, c.Token, one, time.Hour); err != nil {
			t.Fatal(err)
		}
		if st.Bytes() > 3*size+size/2 {
			t.Fatalf("bytes %d over the bound", st.Bytes())
		}
	}
	if recs, _ := st.Len(); recs != 3 {
		t.Fatalf("records = %d, want 3", recs)
	}
	for i, want := range []stateWant{{"id-0", StateClaimed}, {"id-1", StateClaimed}, {"id-2", StateRecorded}, {"id-4", StateRecorded}} {
		c, err := st.Claim(ctx, want.id, time.Hour)
		if err != nil || c.State != want.state {
			t.Fatalf("%d %s: %v %v", i, want.id, c.State, err)
		}
	}

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

type stateWant struct {
	id    string
	state ClaimState
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
	// Released: a retry forwards again rather than waiting.
	if rep2 := mustDo(t, g, req, a.forward(req)); rep2.Replayed || a.count() != 2 {
		t.Fatalf("%+v forwards=%d", rep2, a.count())
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
