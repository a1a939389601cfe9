package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
)

// fixtureAction returns the fixture's job.start input and the agent's
// result as the Guard records it (replay_safety.strictly_idempotent_response
// added, keys sorted).
func fixtureAction(b *testing.B) (input, result json.RawMessage) {
	b.Helper()
	raw, err := os.ReadFile("../test/testdata/agent_interviewer_mvp.json")
	if err != nil {
		b.Fatal(err)
	}
	var f struct {
		ActionRequest struct {
			Input json.RawMessage `json:"input"`
		} `json:"action_request"`
		ActionResult map[string]any `json:"action_result"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		b.Fatal(err)
	}
	f.ActionResult["replay_safety"] = map[string]any{"strictly_idempotent_response": true}
	result, err = json.Marshal(f.ActionResult)
	if err != nil {
		b.Fatal(err)
	}
	return f.ActionRequest.Input, result
}

func benchRecord(b *testing.B) idempotency.Record {
	input, result := fixtureAction(b)
	fp, err := idempotency.Fingerprint("mission_123", "job_123", input)
	if err != nil {
		b.Fatal(err)
	}
	return idempotency.Record{Fingerprint: fp, Status: http.StatusOK,
		Header: http.Header{"Content-Type": {"application/json"}}, Result: result}
}

func benchKeyID(i int) string {
	return idempotency.Key{WorkspaceID: "workspace_123", AgentSlug: "agent_interviewer", Action: "job.start",
		IdempotencyKey: "idem-" + strconv.Itoa(i)}.ID()
}

// claimRecord is one first job.start through the store: claim, then record.
func claimRecord(b *testing.B, s *idempotency.MemoryStore, id string, rec idempotency.Record) {
	ctx := context.Background()
	c, err := s.Claim(ctx, id, idempotency.DefaultLockTTL)
	if err != nil || c.State != idempotency.StateClaimed {
		b.Fatalf("claim: %v %v", c.State, err)
	}
	if err := s.Record(ctx, id, c.Token, rec, idempotency.DefaultTTL); err != nil {
		b.Fatal(err)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMemoryStoreMemory measures the heap held by the idempotency
// memory store after `inserted` recorded job.start keys (the fixture's
// result, ~0.5 KB), with the default bounds (10,000 entries, 64 MiB of
// accounted bytes; live records are never evicted, so a full store refuses
// new keys: inserts stop at the bound) and with the bounds
// raised to hold every key. It reports entries kept, heap MiB, bytes per
// entry and the store's own byte accounting (what max_bytes bounds).
// Run with -benchtime 1x.
func BenchmarkMemoryStoreMemory(b *testing.B) {
	rec := benchRecord(b)
	for _, bound := range []string{"default", "raised"} {
		for _, n := range []int{1_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("bound=%s/inserted=%d", bound, n), func(b *testing.B) {
				if testing.Short() && bound == "default" && n >= 1_000_000 {
					b.Skip("-short: a minute or more (every claim on the full store scans all 10,000 records); the store holds 10,000 entries, as at 10^5")
				}
				for b.Loop() {
					ids := make([]string, n) // the ids exist before the store: not counted
					for i := range ids {
						ids[i] = benchKeyID(i)
					}
					// One group (these keys share a workspace): the whole bound.
					opts := idempotency.MemoryOptions{MaxEntriesPerGroup: idempotency.DefaultMemoryMaxEntries}
					if bound == "raised" {
						opts = idempotency.MemoryOptions{MaxEntries: n, MaxEntriesPerGroup: n, MaxBytes: 1 << 40}
					}
					before := heapAlloc()
					s := idempotency.NewMemoryStore(opts)
					start := time.Now()
					for j, id := range ids {
						if bound == "default" && j >= idempotency.DefaultMemoryMaxEntries {
							break // a full store refuses new keys (live records are never evicted)
						}
						claimRecord(b, s, id, rec)
					}
					perInsert := time.Since(start) / time.Duration(n)
					after := heapAlloc()
					kept, _ := s.Len()
					held := float64(after) - float64(before)
					b.ReportMetric(float64(kept), "entries")
					b.ReportMetric(held/(1<<20), "heap-MiB")
					b.ReportMetric(held/float64(kept), "B/entry")
					b.ReportMetric(float64(s.Bytes())/(1<<20), "accounted-MiB")
					b.ReportMetric(float64(perInsert.Nanoseconds()), "ns/insert")
					runtime.KeepAlive(ids)
					_ = s.Close()
				}
			})
		}
	}
}

// BenchmarkMemoryStore measures the store operations of a job.start:
//   - claim_record/not_full: a first call (claim, then record) with free slots;
//   - claim_refused/full: a claim once the store holds max_entries (10,000)
//     live records: live records are never evicted, so the claim purges
//     expired records (none here) and is refused with ErrStoreFull;
//   - claim_recorded: a retry's claim of a recorded key (a replay's store
//     work: the record is cloned out).
func BenchmarkMemoryStore(b *testing.B) {
	rec := benchRecord(b)
	const pre = 200_000
	ids := make([]string, pre)
	for i := range ids {
		ids[i] = benchKeyID(i)
	}
	b.Run("claim_record/not_full", func(b *testing.B) {
		s := idempotency.NewMemoryStore(idempotency.MemoryOptions{MaxEntries: 1 << 30, MaxBytes: 1 << 40})
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			claimRecord(b, s, ids[i%pre], rec)
			i++
			if i%pre == 0 {
				_ = s.Close()
				s = idempotency.NewMemoryStore(idempotency.MemoryOptions{MaxEntries: 1 << 30, MaxBytes: 1 << 40})
			}
		}
	})
	b.Run("claim_refused/full", func(b *testing.B) {
		s := idempotency.NewMemoryStore(idempotency.MemoryOptions{MaxEntriesPerGroup: idempotency.DefaultMemoryMaxEntries})
		for i := 0; i < idempotency.DefaultMemoryMaxEntries; i++ {
			claimRecord(b, s, ids[i], rec)
		}
		ctx := context.Background()
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			id := ids[idempotency.DefaultMemoryMaxEntries+i%(pre-idempotency.DefaultMemoryMaxEntries)] // never recorded
			if _, err := s.Claim(ctx, id, idempotency.DefaultLockTTL); !errors.Is(err, idempotency.ErrStoreFull) {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("claim_recorded", func(b *testing.B) {
		s := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
		claimRecord(b, s, ids[0], rec)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			c, err := s.Claim(ctx, ids[0], idempotency.DefaultLockTTL)
			if err != nil || c.State != idempotency.StateRecorded {
				b.Fatal(c.State, err)
			}
		}
	})
}

// BenchmarkGuardReplay is idempotency.Guard.Do answering a retry of the
// fixture's job.start from the memory store (key id, claim, record clone,
// reply envelope), plus the Fingerprint the gate computes first.
func BenchmarkGuardReplay(b *testing.B) {
	input, result := fixtureAction(b)
	g := idempotency.New(idempotency.NewMemoryStore(idempotency.MemoryOptions{}), idempotency.Options{})
	key := idempotency.Key{WorkspaceID: "workspace_123", AgentSlug: "agent_interviewer", Action: "job.start",
		IdempotencyKey: "idem_start_campaign_123"}
	body := []byte(`{"jsonrpc":"2.0","id":7,"result":` + string(result) + `}`)
	forward := func(context.Context) (idempotency.Response, error) {
		return idempotency.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}, nil
	}
	ctx := context.Background()
	do := func() idempotency.Reply {
		fp, err := idempotency.Fingerprint("mission_123", "job_123", input)
		if err != nil {
			b.Fatal(err)
		}
		r, err := g.Do(ctx, idempotency.Request{Key: key, Fingerprint: fp, ID: json.RawMessage("7")}, forward)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	do()
	if !do().Replayed {
		b.Fatal("not a replay")
	}
	b.Run("fingerprint_and_do", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			do()
		}
	})
	b.Run("fingerprint_only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := idempotency.Fingerprint("mission_123", "job_123", input); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("key_id_only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = key.ID()
		}
	})
}
