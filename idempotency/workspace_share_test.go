package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// TestWorkspaceBytesShare: in the memory, file and Redis stores (single,
// Sentinel waiting for a replica, Cluster), a workspace
// whose records reach MaxBytesPerGroup cannot deny the others: its next
// answer is returned to its caller once, not recorded, and the key stays in
// flight until the lock TTL (a retry waits, then idempotency_in_progress;
// the agent is not called again); another workspace's job.start is then
// claimed, forwarded and recorded as usual, never
// idempotency_store_unavailable.
func TestWorkspaceBytesShare(t *testing.T) {
	f := loadFixture(t)
	big := json.RawMessage(`{"status":"ok","blob":"` + strings.Repeat("x", 100<<10) + `"}`) // ~100 KiB per answer
	limits := MemoryOptions{MaxBytes: 1 << 20}                                              // share: 128 KiB, one answer
	share := limits.Resolved().MaxBytesPerGroup
	for name, open := range map[string]func(t *testing.T) Store{
		"memory": func(t *testing.T) Store { return NewMemoryStore(limits) },
		"file": func(t *testing.T) Store {
			return newFile(t, FileOptions{Path: tempDB(t), MaxBytes: limits.MaxBytes})
		},
		"redis": func(t *testing.T) Store {
			return newRedis(t, RedisOptions{URL: redistest.Start(t).URL(), MaxBytesPerGroup: share})
		},
		"redis-sentinel-acked": func(t *testing.T) Store {
			sen := redistest.StartSentinel(t)
			return newRedis(t, RedisOptions{Mode: RedisModeSentinel, URL: sen.FailoverURL(), MinReplicasAck: 1,
				ReplicaAckTimeout: ackPatience, MaxBytesPerGroup: share})
		},
		"redis-cluster": func(t *testing.T) Store {
			return newRedis(t, RedisOptions{Mode: RedisModeCluster, URL: redistest.StartCluster(t).URL(), MaxBytesPerGroup: share})
		},
	} {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			a := newAgent(big)
			g := New(st, Options{LockTTL: time.Minute, WaitTimeout: 50 * time.Millisecond})
			inWorkspace := func(ws, key string) Request {
				req := withKey(f.request(t, `1`), key)
				req.Key.WorkspaceID = ws
				return req
			}
			first := inWorkspace("wsA", "a1")
			mustDo(t, g, first, a.forward(first))
			over := inWorkspace("wsA", "a2")
			rep := mustDo(t, g, over, a.forward(over))
			if rep.Replayed || rep.Status != 200 || !strings.Contains(string(rep.Body), `"blob"`) {
				t.Fatalf("the answer over the share was not returned: %+v", rep)
			}
			if _, err := g.Do(context.Background(), over, a.forward(over)); codeOf(err) != CodeInProgress {
				t.Fatalf("retry of the unrecorded key: %v, want %s", err, CodeInProgress)
			}
			for _, k := range []string{"b1"} {
				req := inWorkspace("wsB", k)
				rep, err := g.Do(context.Background(), req, a.forward(req))
				if err != nil || rep.Replayed {
					t.Fatalf("wsB's job.start after wsA filled its share: %v (%s)", err, codeOf(err))
				}
				if !mustDo(t, g, req, a.forward(req)).Replayed {
					t.Fatalf("wsB's record was not kept")
				}
			}
			if !mustDo(t, g, first, a.forward(first)).Replayed {
				t.Fatal("wsA's first record lost")
			}
			if a.count() != 3 {
				t.Fatalf("forwards = %d, want 3", a.count())
			}
		})
	}
}

// TestWorkspaceBytesShareRecordError: Record past the share fails with
// ErrOverGroupShare, which is an ErrRecordTooLarge, and keeps the mark.
func TestWorkspaceBytesShareRecordError(t *testing.T) {
	ctx := context.Background()
	st := NewMemoryStore(MemoryOptions{MaxBytes: 1 << 20, MaxBytesPerGroup: 1000})
	c, err := st.ClaimGroup(ctx, "id", "ws", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rec := Record{Fingerprint: "fp", Status: 200, Result: json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`)}
	if err := st.Record(ctx, "id", c.Token, rec, time.Hour); !errors.Is(err, ErrOverGroupShare) || !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("record over the share: %v", err)
	}
	if res, _ := st.ClaimGroup(ctx, "id", "ws", time.Minute); res.State != StateInFlight {
		t.Fatalf("mark lost: %v", res.State)
	}
}

// shareStores opens each store kind with the bounds of opts (Redis takes
// its shares from them as the gate passes them: SetLimits).
func shareStores(t *testing.T, opts MemoryOptions) map[string]func(t *testing.T) Store {
	l := opts.Resolved()
	return map[string]func(t *testing.T) Store{
		"memory": func(t *testing.T) Store { return NewMemoryStore(opts) },
		"file": func(t *testing.T) Store {
			return newFile(t, FileOptions{Path: tempDB(t), MaxEntries: opts.MaxEntries, MaxBytes: opts.MaxBytes,
				MaxEntriesPerGroup: opts.MaxEntriesPerGroup, MaxBytesPerGroup: opts.MaxBytesPerGroup})
		},
		"redis": func(t *testing.T) Store {
			return newRedis(t, RedisOptions{URL: redistest.Start(t).URL(), MaxEntriesPerGroup: l.MaxEntriesPerGroup,
				MaxBytesPerGroup: l.MaxBytesPerGroup})
		},
		"redis-sentinel-acked": func(t *testing.T) Store {
			sen := redistest.StartSentinel(t)
			return newRedis(t, RedisOptions{Mode: RedisModeSentinel, URL: sen.FailoverURL(), MinReplicasAck: 1,
				ReplicaAckTimeout: ackPatience, MaxEntriesPerGroup: l.MaxEntriesPerGroup, MaxBytesPerGroup: l.MaxBytesPerGroup})
		},
		"redis-cluster": func(t *testing.T) Store {
			return newRedis(t, RedisOptions{Mode: RedisModeCluster, URL: redistest.StartCluster(t).URL(),
				MaxEntriesPerGroup: l.MaxEntriesPerGroup, MaxBytesPerGroup: l.MaxBytesPerGroup})
		},
	}
}

// TestDefaultShareIsOneEighth: the one share rule, for entries and bytes
// alike, whatever the totals: unless set, a workspace's share is an eighth
// of the store's entries and of its bytes (rounded down).
func TestDefaultShareIsOneEighth(t *testing.T) {
	for _, tc := range []struct {
		in               MemoryOptions
		entries, bytesPG int64
	}{
		{MemoryOptions{}, DefaultMemoryMaxEntries / 8, DefaultMemoryMaxBytes / 8},
		{MemoryOptions{MaxEntries: 100, MaxBytes: 1000}, 12, 125},
		{MemoryOptions{MaxEntries: 8, MaxBytes: 8}, 1, 1},
		{MemoryOptions{MaxEntries: 7, MaxBytes: 15}, 0, 1}, // refused by Validate (TestValidateDefaultShareZero)
		{MemoryOptions{MaxEntries: 100, MaxEntriesPerGroup: 60, MaxBytes: 1000, MaxBytesPerGroup: 900}, 60, 900},
	} {
		l := tc.in.Resolved()
		if int64(l.MaxEntriesPerGroup) != tc.entries || l.MaxBytesPerGroup != tc.bytesPG {
			t.Errorf("%+v: shares %d entries, %d bytes; want %d, %d", tc.in, l.MaxEntriesPerGroup, l.MaxBytesPerGroup, tc.entries, tc.bytesPG)
		}
		if 7*int64(l.MaxEntriesPerGroup) > int64(l.MaxEntries) && tc.in.MaxEntriesPerGroup == 0 {
			t.Errorf("%+v: seven default entries shares pass the total", tc.in)
		}
	}
}

// TestSevenFullSharesLeaveTheEighth: in every store (memory, file, Redis
// single, Sentinel waiting for a replica, Cluster), with max_entries 64 and
// the default shares (8 entries each), seven workspaces each claim and
// record until refused: each gets exactly its 8, and its ninth is refused
// as its own share (ShareFullError: idempotency_store_unavailable with a
// message naming max_entries_per_workspace, Reason ReasonShareFull, counted
// by Observer.ShareFull and not as a store error); the agent is not called
// for it. An eighth workspace then still gets its whole share; the
// flooders' records still replay.
func TestSevenFullSharesLeaveTheEighth(t *testing.T) {
	f := loadFixture(t)
	opts := MemoryOptions{MaxEntries: 64}
	share := opts.Resolved().MaxEntriesPerGroup
	for name, open := range shareStores(t, opts) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			a := newAgent(f.Result)
			c := newCounters()
			var fulls int
			obs := c.observer()
			obs.ShareFull = func(Key) { fulls++ }
			g := New(st, Options{Observer: obs})
			inWorkspace := func(ws, key string) Request {
				req := withKey(f.request(t, `1`), key)
				req.Key.WorkspaceID = ws
				return req
			}
			for w := 1; w <= 7; w++ {
				ws := "flood" + itoa(w)
				n := 0
				for ; n <= share; n++ { // bounded: one past the share
					req := inWorkspace(ws, "k"+itoa(n))
					before := a.count()
					_, err := g.Do(context.Background(), req, a.forward(req))
					if err == nil {
						continue
					}
					var e *refusal.Refusal
					if !errors.As(err, &e) || e.Code != CodeStoreUnavailable || e.Reason != AuditShareFull ||
						!strings.Contains(e.Message, "max_entries_per_workspace: "+itoa(share)) || !errors.Is(err, ErrStoreFull) {
						t.Fatalf("%s key %d: %v", ws, n, err)
					}
					if a.count() != before {
						t.Fatalf("%s: the refused call reached the agent", ws)
					}
					break
				}
				if n != share {
					t.Fatalf("%s was refused after %d keys, want its share %d", ws, n, share)
				}
			}
			if fulls != 7 || len(c.errs()) != 0 {
				t.Fatalf("ShareFull %d times (want 7), store errors %v", fulls, c.errs())
			}
			for n := 0; n < share; n++ {
				req := inWorkspace("eighth", "k"+itoa(n))
				if rep, err := g.Do(context.Background(), req, a.forward(req)); err != nil || rep.Replayed {
					t.Fatalf("the eighth workspace's key %d after seven full shares: %v", n, err)
				}
			}
			req := inWorkspace("flood3", "k0")
			if !mustDo(t, g, req, a.forward(req)).Replayed {
				t.Fatal("a flooder's record lost")
			}
			if got := a.count(); got != int64(8*share) {
				t.Fatalf("forwards = %d, want %d", got, 8*share)
			}
		})
	}
}

// TestMemoryShareCountsLiveEntriesOnly: "full" is full of live entries.
// Records of a neighbour kept with a long TTL sit before a workspace's
// short-TTL records (a reload shortened ttl): once the workspace's own
// records expire it claims again, although none of the neighbour's did.
func TestMemoryShareCountsLiveEntriesOnly(t *testing.T) {
	ctx := context.Background()
	st := NewMemoryStore(MemoryOptions{MaxEntries: 16}) // 2 each
	rec := Record{Fingerprint: "fp", Status: 200, Result: json.RawMessage(`{}`)}
	put := func(id, ws string, ttl time.Duration) {
		t.Helper()
		c, err := st.ClaimGroup(ctx, id, ws, time.Minute)
		if err != nil || c.State != StateClaimed {
			t.Fatalf("claim %s: %+v %v", id, c, err)
		}
		if err := st.Record(ctx, id, c.Token, rec, ttl); err != nil {
			t.Fatal(err)
		}
	}
	put("n1", "neighbour", time.Hour)
	put("n2", "neighbour", time.Hour)
	put("v1", "victim", time.Millisecond)
	put("v2", "victim", time.Millisecond)
	eventually(t, "the victim's records to expire", func() bool {
		c, err := st.ClaimGroup(ctx, "v3", "victim", time.Minute)
		return err == nil && c.State == StateClaimed
	})
	if _, err := st.ClaimGroup(ctx, "n3", "neighbour", time.Minute); !errors.As(err, new(*ShareFullError)) {
		t.Fatalf("the neighbour past its live share: %v", err)
	}
}

// TestFileShareSweepsPastNeighboursExpired: a file store's expiry index is
// ordered across workspaces. More than one sweep batch of a neighbour's
// expired entries before a workspace's own expired ones do not keep that
// workspace over its share: the claim drops every expired entry before it
// refuses.
func TestFileShareSweepsPastNeighboursExpired(t *testing.T) {
	ctx := context.Background()
	st := newFile(t, FileOptions{Path: tempDB(t), MaxEntries: 100_000, MaxEntriesPerGroup: 2})
	old := time.Now().Add(-time.Hour).UnixMilli()
	err := st.update(time.Now().UnixMilli(), func(tx *fileTx) error {
		for i := 0; i < 3*fullSweepBatch; i++ { // the neighbour's, expired first
			if err := tx.putMark("n"+itoa(i), fileMark{Token: "t", Expires: old, Group: "neighbour"}); err != nil {
				return err
			}
		}
		for _, id := range []string{"v1", "v2"} { // the victim's, expired after
			if err := tx.putMark(id, fileMark{Token: "t", Expires: old + 1, Group: "victim"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.ClaimGroup(ctx, "v3", "victim", time.Minute)
	if err != nil || c.State != StateClaimed {
		t.Fatalf("the victim's claim with only expired entries of its own: %+v %v", c, err)
	}
	if recs, marks := st.Len(); recs != 0 || marks != 1 {
		t.Fatalf("left %d records, %d marks; want the new mark alone", recs, marks)
	}
}

// TestRedisEntriesShare: in Redis, a workspace's live marks and records
// count against its entries share in its own slot: a claim that finds a
// record or a live mark costs nothing (a replay at a full share still
// replays), a released mark gives its entry back, and an expired mark's
// entry frees the share.
func TestRedisEntriesShare(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, RedisOptions{URL: srv.URL(), MaxEntriesPerGroup: 2})
	st.reserveMargin = 50 * time.Millisecond
	ctx := context.Background()
	rec := shareRecord(10)
	if err := st.Record(ctx, "r1", claimIn(t, st, "r1", "ws"), rec, time.Hour); err != nil {
		t.Fatal(err)
	}
	tok := claimIn(t, st, "m1", "ws")
	if _, err := st.ClaimGroup(ctx, "x", "ws", time.Minute); !errors.As(err, new(*ShareFullError)) {
		t.Fatalf("a third entry: %v", err)
	}
	if c, err := st.ClaimGroup(ctx, "r1", "ws", time.Minute); err != nil || c.State != StateRecorded {
		t.Fatalf("a replay at a full share: %+v %v", c, err)
	}
	if c, err := st.ClaimGroup(ctx, "m1", "ws", time.Minute); err != nil || c.State != StateInFlight {
		t.Fatalf("a retry of the in-flight key at a full share: %+v %v", c, err)
	}
	if err := st.Release(ctx, "m1", tok); err != nil {
		t.Fatal(err)
	}
	c, err := st.ClaimGroup(ctx, "y", "ws", 20*time.Millisecond)
	if err != nil || c.State != StateClaimed {
		t.Fatalf("after a release: %+v %v", c, err)
	}
	if _, err := st.ClaimGroup(ctx, "z", "ws", time.Minute); !errors.As(err, new(*ShareFullError)) {
		t.Fatalf("full again: %v", err)
	}
	eventually(t, "the expired mark's entry to free the share", func() bool {
		c, err := st.ClaimGroup(ctx, "z", "ws", time.Minute)
		return err == nil && c.State == StateClaimed
	})
	if c, err := st.ClaimGroup(ctx, "other", "ws2", time.Minute); err != nil || c.State != StateClaimed {
		t.Fatalf("another workspace: %+v %v", c, err)
	}
}

// TestSevenFullBytesSharesLeaveTheEighth: the same rule for bytes. With
// max_bytes 8 × 2,500 and the default shares (2,500 bytes each), seven
// workspaces record ~1 KB answers until one is over their share (returned
// once, unrecorded); the eighth then still records as many as each of
// them, in every store.
func TestSevenFullBytesSharesLeaveTheEighth(t *testing.T) {
	f := loadFixture(t)
	answer := json.RawMessage(`{"status":"ok","blob":"` + strings.Repeat("x", 1000) + `"}`)
	opts := MemoryOptions{MaxEntries: 8000, MaxBytes: 8 * 2500}
	for name, open := range shareStores(t, opts) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			a := newAgent(answer)
			g := New(st, Options{LockTTL: time.Minute, WaitTimeout: 50 * time.Millisecond})
			recordedOf := func(ws string) int {
				n := 0
				for i := 0; i < 5; i++ { // bounded: the share holds two
					req := withKey(f.request(t, `1`), ws+"-"+itoa(i))
					req.Key.WorkspaceID = ws
					if rep, err := g.Do(context.Background(), req, a.forward(req)); err != nil || rep.Replayed {
						t.Fatalf("%s key %d: %v", ws, i, err)
					}
					if rep, err := g.Do(context.Background(), req, a.forward(req)); err == nil && rep.Replayed {
						n++
					}
				}
				return n
			}
			want := recordedOf("flood1")
			if want < 1 || want > 2 {
				t.Fatalf("a workspace recorded %d ~1 KB answers in a 2,500-byte share", want)
			}
			for w := 2; w <= 7; w++ {
				if n := recordedOf("flood" + itoa(w)); n != want {
					t.Fatalf("flood%d recorded %d, want %d", w, n, want)
				}
			}
			if n := recordedOf("eighth"); n != want {
				t.Fatalf("the eighth workspace recorded %d after seven full bytes shares, want %d", n, want)
			}
		})
	}
}
