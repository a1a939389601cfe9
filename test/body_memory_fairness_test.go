package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBodyMemoryFairnessSDKAgent: one workspace flooding the sidecar with
// large slow /a2a bodies cannot starve the others of body_memory
// (docs/workspaces.md, "Fair by default"), in front of the real SDK 1.8.0
// agent, over HTTP/1.1, HTTP/2 (TLS and h2c) and HTTP/3.
//
// body_memory 4MiB and max_body_a2a 1MiB: each workspace may always hold
// min(4MiB/8, 3MiB/7) ≈ 439 KiB, and one workspace at most one body of
// max_body_a2a. Workspace F starts an idempotent job.start of almost 1 MiB
// and holds back its last bytes: once it is charged whole (the status
// page's in_use), F starts five more such calls, held back the same way.
// The sidecar refuses each of them at its first bytes, beyond F's share
// (refused_workspace_share), while they still arrive; without the share
// they would be charged too and fill the budget. Then three other
// workspaces each send a job.start and a 256 KiB job.sync, all at once:
// every one is answered by the agent. F's bodies are then finished: the
// first is answered by the agent, the five others get the retryable 503
// server_busy (audit code body_memory_workspace_share_full). The agent's
// own log shows every allowed call run exactly once and none of F's
// refused calls.
func TestBodyMemoryFairnessSDKAgent(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	const budget, bound = 4 << 20, 1 << 20
	ps := startEveryProtocol(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath,
		fmt.Sprintf("\t\tmax_body_a2a %d\n\t\tbody_memory %d\n\t\tbody_timeout 2m\n", bound, budget)))
	waitReady(t, ps.sidecar)
	const shareFull = `"code":"body_memory_workspace_share_full"`

	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		tag := strings.NewReplacer("/", "", " ", "", ".", "").Replace(strings.ToLower(v.name))
		eventually(t, 20*time.Second, "no body held before the flood", func() bool {
			return ps.bodyMemory(t)["in_use"] == 0
		})
		before := ps.bodyMemory(t)
		logBefore := strings.Count(ps.logs(t), shareFull)
		// The flood's client waits as long as the flood lasts (the
		// version's own client gives up after 20 s).
		slowClient := *v.client
		slowClient.Timeout = 2 * time.Minute

		wsF := "ws-flood-" + tag
		tokF := key.mint(t, sdkClaims(wsF))
		// A job.start body of bound−4096 bytes (declared), its last
		// 1,024 held back until the end of the test.
		floodBody := func(requestID string) []byte {
			return padTo(t, sdkAction(t, wsF, "job.start", func(req map[string]any) { req["request_id"] = requestID }), bound-4096)
		}
		first := "req-f0-" + randomID()
		f0 := startHeldBack(&slowClient, v.base, floodBody(first), tokF, 1024)
		defer f0.finish() // on an early failure, so that the sidecar's handlers end
		eventually(t, 30*time.Second, "F's first body charged whole", func() bool {
			return ps.bodyMemory(t)["in_use"] >= bound-4096
		}, func() string { return fmt.Sprintf("%v", ps.bodyMemory(t)) })
		var refusedIDs []string
		var more []*heldBack
		for i := range 5 {
			id := fmt.Sprintf("req-f%d-%s", i+1, randomID())
			refusedIDs = append(refusedIDs, id)
			c := startHeldBack(&slowClient, v.base, floodBody(id), tokF, 1024)
			defer c.finish()
			more = append(more, c)
		}
		// Each of the five is refused at its first bytes, or (without a
		// share) charged whole or refused with the budget full.
		eventually(t, 30*time.Second, "F's five other bodies refused or charged", func() bool {
			st := ps.bodyMemory(t)
			refused := st["refused_workspace_share"] - before["refused_workspace_share"] + st["refused_full"] - before["refused_full"]
			return refused+st["in_use"]/(bound-4096) >= 6
		}, func() string { return fmt.Sprintf("%v", ps.bodyMemory(t)) })
		if st := ps.bodyMemory(t); st["in_use"] != bound-4096 || st["refused_workspace_share"]-before["refused_workspace_share"] < 5 {
			t.Errorf("while F floods: body_memory %v: want F's first body only held, the five others refused at its share", st)
		}

		// The others, all at once, while F holds all it may.
		type call struct {
			ws, id, idem string
			body         []byte
			tok          string
		}
		var calls []call
		for i := range 3 {
			ws := fmt.Sprintf("ws-other%d-%s", i, tag)
			tok := key.mint(t, sdkClaims(ws))
			start := call{ws: ws, id: "req-s-" + randomID(), idem: "idem-" + randomID(), tok: tok}
			start.body = sdkAction(t, ws, "job.start", func(req map[string]any) {
				req["request_id"], req["idempotency_key"] = start.id, start.idem
			})
			syncCall := call{ws: ws, id: "req-y-" + randomID(), tok: tok}
			syncCall.body = padTo(t, sdkAction(t, ws, "job.sync", func(req map[string]any) {
				req["request_id"] = syncCall.id
				delete(req, "idempotency_key")
			}), 256<<10)
			calls = append(calls, start, syncCall)
		}
		answers := make([]heldBackResult, len(calls))
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() { answers[i] = postA2A(v.client, v.base, bytes.NewReader(c.body), int64(len(c.body)), c.tok) })
		}
		wg.Wait()
		for i, a := range answers {
			if a.err != nil || a.status != http.StatusOK || !bytes.Contains(a.body, []byte(`"result"`)) || bytes.Contains(a.body, []byte(`"error"`)) {
				t.Errorf("%s's call %s while F floods: %d %v %.300s", calls[i].ws, calls[i].id, a.status, a.err, a.body)
			}
		}

		// F's bodies end: the first is forwarded, the others refused.
		r0 := f0.finish()
		if r0.err != nil || r0.status != http.StatusOK || !bytes.Contains(r0.body, []byte(`"result"`)) {
			t.Errorf("F's first call: %d %v %.300s", r0.status, r0.err, r0.body)
		}
		for i, c := range more {
			r := c.finish()
			if r.err != nil || r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
				!bytes.Contains(r.body, []byte(`"server_busy"`)) || !bytes.Contains(r.body, []byte(`-32603`)) {
				t.Errorf("F's call %d beyond its share: %d %v Retry-After %q %.300s", i+1, r.status, r.err, r.header.Get("Retry-After"), r.body)
			}
		}
		eventually(t, 10*time.Second, "five audit lines "+shareFull, func() bool {
			return strings.Count(ps.logs(t), shareFull)-logBefore == 5
		}, func() string { return fmt.Sprintf("%d lines", strings.Count(ps.logs(t), shareFull)-logBefore) })

		// What the agent ran: each allowed call once, no refused one.
		runs := map[string]int{}
		for _, e := range ag.entries("action") {
			runs[e.RequestID]++
		}
		for _, c := range calls {
			if runs[c.id] != 1 {
				t.Errorf("the agent ran %s's call %s %d times, want 1", c.ws, c.id, runs[c.id])
			}
			if c.idem != "" && ag.actionRuns(c.idem) != 1 {
				t.Errorf("the agent ran %s's job.start (key %s) %d times, want 1", c.ws, c.idem, ag.actionRuns(c.idem))
			}
		}
		if runs[first] != 1 {
			t.Errorf("the agent ran F's first call %d times, want 1", runs[first])
		}
		for _, id := range refusedIDs {
			if runs[id] != 0 {
				t.Errorf("the agent ran F's refused call %s", id)
			}
		}
	})
}

// bodyMemory is the body_memory object of /_sidecar/status (read key).
func (s *sidecar) bodyMemory(t *testing.T) map[string]int64 {
	t.Helper()
	r := do(t, http.MethodGet, s.base+"/_sidecar/status", nil, "X-API-Key", testReadKey)
	var st struct {
		BodyMemory map[string]int64 `json:"body_memory"`
	}
	if r.Status != http.StatusOK || json.Unmarshal(r.Body, &st) != nil || st.BodyMemory == nil {
		t.Fatalf("/_sidecar/status: %d %.300s", r.Status, r.Body)
	}
	return st.BodyMemory
}

// heldBackResult is the answer to one POST /a2a sent from a goroutine.
type heldBackResult struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// postA2A posts body (of length n) to /a2a on base with the write key and
// token tok; safe off the test's goroutine.
func postA2A(cl *http.Client, base string, body io.Reader, n int64, tok string) heldBackResult {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/a2a", body)
	if err != nil {
		return heldBackResult{err: err}
	}
	req.ContentLength = n
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	resp, err := cl.Do(req)
	if err != nil {
		return heldBackResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return heldBackResult{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// heldBack is a POST /a2a whose body is sent but for its last bytes, which
// finish sends (a slow client in the middle of its upload).
type heldBack struct {
	release chan struct{} // closed by finish: the tail is sent
	done    chan heldBackResult
	once    sync.Once
	res     heldBackResult
}

// startHeldBack starts posting body, declared whole, holding back its last
// tail bytes.
func startHeldBack(cl *http.Client, base string, body []byte, tok string, tail int) *heldBack {
	pr, pw := io.Pipe()
	h := &heldBack{release: make(chan struct{}), done: make(chan heldBackResult, 1)}
	go func() {
		r := postA2A(cl, base, pr, int64(len(body)), tok)
		pr.CloseWithError(io.ErrClosedPipe) // a pending write ends
		h.done <- r
	}()
	go func() {
		if _, err := pw.Write(body[:len(body)-tail]); err != nil {
			return
		}
		<-h.release
		_, _ = pw.Write(body[len(body)-tail:])
		_ = pw.Close()
	}()
	return h
}

// finish sends the held-back bytes and returns the answer (once; later
// calls return the same).
func (h *heldBack) finish() heldBackResult {
	h.once.Do(func() {
		close(h.release)
		h.res = <-h.done
	})
	return h.res
}
