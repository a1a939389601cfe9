package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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
