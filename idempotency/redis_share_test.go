package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// shareRecord is a record of about n bytes once stored.
func shareRecord(n int) Record {
	return Record{Fingerprint: "fp", Status: 200, Result: json.RawMessage(`"` + strings.Repeat("x", n) + `"`)}
}

// shareTotal is the bytes the store counts for the group.
func shareTotal(t *testing.T, st *RedisStore, group string) int64 {
	t.Helper()
	n, err := st.client.HGet(context.Background(), st.shareSizeKey(groupTag(group)), "total").Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// claimIn claims id for group and fails the test otherwise.
func claimIn(t *testing.T, st *RedisStore, id, group string) string {
	t.Helper()
	c, err := st.ClaimGroup(context.Background(), id, group, time.Minute)
	if err != nil || c.State != StateClaimed {
		t.Fatalf("claim %s: %+v %v", id, c, err)
	}
	return c.Token
}

// TestRedisShareExpiredRecordsFreeIt: a workspace's records count against
// its share only while they live: past the share a record is refused
// (ErrOverGroupShare, the mark kept, nothing written), another workspace is
// unaffected, and once the first records expire the workspace records
// again; the accounting keys expire with their last reservation.
func TestRedisShareExpiredRecordsFreeIt(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, RedisOptions{URL: srv.URL(), MaxBytesPerGroup: 3000})
	st.reserveMargin = 50 * time.Millisecond
	ctx := context.Background()
	rec := shareRecord(2000)

	if err := st.Record(ctx, "a1", claimIn(t, st, "a1", "wsA"), rec, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	tok := claimIn(t, st, "a2", "wsA")
	if err := st.Record(ctx, "a2", tok, rec, time.Hour); !errors.Is(err, ErrOverGroupShare) {
		t.Fatalf("record past the share: %v", err)
	}
	if n, _ := st.client.Exists(ctx, st.recKey("a2")).Result(); n != 0 {
		t.Fatal("a record past the share was written")
	}
	if c, _ := st.ClaimGroup(ctx, "a2", "wsA", time.Minute); c.State != StateInFlight {
		t.Fatalf("the mark of the refused record: %v", c.State)
	}
	if err := st.Record(ctx, "b1", claimIn(t, st, "b1", "wsB"), rec, time.Hour); err != nil {
		t.Fatalf("another workspace: %v", err)
	}
	// a1 expires: wsA's share is free again (a2's mark still holds, so a3).
	a3 := claimIn(t, st, "a3", "wsA")
	eventually(t, "a1's bytes to be freed", func() bool {
		err := st.Record(ctx, "a3", a3, rec, time.Hour)
		if err != nil && !errors.Is(err, ErrOverGroupShare) {
			t.Fatal(err)
		}
		return err == nil
	})
	if got := shareTotal(t, st, "wsA"); got != int64(len(mustWire(t, rec))+len("a3")) {
		t.Fatalf("wsA counts %d bytes after a1 expired, want a3's only", got)
	}
	// Bounded: both accounting keys expire with the last reservation.
	for _, k := range []string{st.shareExpKey(groupTag("wsA")), st.shareSizeKey(groupTag("wsA"))} {
		if p, err := st.client.PTTL(ctx, k).Result(); err != nil || p <= 0 || p > time.Hour+time.Second {
			t.Fatalf("%s PTTL %v %v", k, p, err)
		}
	}
}

func mustWire(t *testing.T, rec Record) []byte {
	t.Helper()
	raw, err := json.Marshal(wireRecord{V: 1, Fingerprint: rec.Fingerprint, Status: rec.Status, Header: rec.Header, Result: rec.Result})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestRedisShareGivenBackWhenNotRecorded: a reservation whose record was
// provably not written is given back: the token lost its claim, or Redis
// answered the record script with an error; a record whose outcome is
// unknown keeps it (counted until it expires, never too little).
func TestRedisShareGivenBackWhenNotRecorded(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, RedisOptions{URL: srv.URL(), MaxBytesPerGroup: 1 << 20})
	ctx := context.Background()
	rec := shareRecord(1000)

	tok := claimIn(t, st, "lost", "ws")
	stale := groupToken("00000000000000000000000000000000", "ws")
	if err := st.Record(ctx, "lost", stale, rec, time.Hour); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("stale token: %v", err)
	}
	if got := shareTotal(t, st, "ws"); got != 0 {
		t.Fatalf("after a lost claim the workspace counts %d bytes, want 0", got)
	}

	// The lock turned into a hash: the record script fails (WRONGTYPE).
	if err := st.client.Del(ctx, st.lockKey("lost")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.client.HSet(ctx, st.lockKey("lost"), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Record(ctx, "lost", tok, rec, time.Hour); codeOf(err) != CodeStoreUnavailable {
		t.Fatalf("record script error: %v", err)
	}
	if got := shareTotal(t, st, "ws"); got != 0 {
		t.Fatalf("after a refused record the workspace counts %d bytes, want 0", got)
	}

	// Unknown outcome (a timeout): the reservation stays.
	r := &reservation{s: st, keys: []string{st.shareExpKey(groupTag("ws")), st.shareSizeKey(groupTag("ws"))}, id: "unknown"}
	if err := r.reserve(ctx, st.client, 500, time.Hour); err != nil {
		t.Fatal(err)
	}
	r.release(ctx, context.DeadlineExceeded)
	if got := shareTotal(t, st, "ws"); got != 500 {
		t.Fatalf("after an unknown outcome the workspace counts %d bytes, want 500", got)
	}
}

// TestRedisShareResentReservationCountsOnce: go-redis may resend a script
// after a lost reply; the same record id is counted once (its new size
// replaces the old).
func TestRedisShareResentReservationCountsOnce(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, RedisOptions{URL: srv.URL(), MaxBytesPerGroup: 1000})
	ctx := context.Background()
	r := &reservation{s: st, keys: []string{st.shareExpKey(groupTag("ws")), st.shareSizeKey(groupTag("ws"))}, id: "id"}
	for i := 0; i < 3; i++ {
		if err := r.reserve(ctx, st.client, 600, time.Hour); err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	if got := shareTotal(t, st, "ws"); got != 600 {
		t.Fatalf("counted %d, want 600", got)
	}
}

// TestRedisShareSetLimits: a reload that keeps the store applies a new
// max_bytes_per_workspace to it; zero means the default (max_bytes/8).
func TestRedisShareSetLimits(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, RedisOptions{URL: srv.URL()})
	if got := st.groupShare.Load(); got != DefaultMemoryMaxBytes/DefaultGroupShare {
		t.Fatalf("default share %d", got)
	}
	ctx := context.Background()
	rec := shareRecord(2000)
	st.SetLimits(MemoryOptions{MaxBytes: 64 << 20, MaxBytesPerGroup: 1000})
	if err := st.Record(ctx, "x", claimIn(t, st, "x", "ws"), rec, time.Hour); !errors.Is(err, ErrOverGroupShare) {
		t.Fatalf("under a 1000-byte share: %v", err)
	}
	st.SetLimits(MemoryOptions{MaxBytes: 64 << 20})
	if err := st.Record(ctx, "y", claimIn(t, st, "y", "ws"), rec, time.Hour); err != nil {
		t.Fatalf("back to the default share: %v", err)
	}
}
