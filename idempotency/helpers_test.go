package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// patience bounds every wait in the tests; it is a failure deadline, never a
// timing assertion.
const patience = 20 * time.Second

// fixture is the SDK's real job.start request and result (testdata/job_start.json).
type fixture struct {
	Request struct {
		IdempotencyKey string `json:"idempotency_key"`
		Workspace      struct {
			ID string `json:"id"`
		} `json:"workspace"`
		MissionID string          `json:"mission_id"`
		AgentSlug string          `json:"agent_slug"`
		JobID     string          `json:"job_id"`
		Action    string          `json:"action"`
		Input     json.RawMessage `json:"input"`
	} `json:"action_request"`
	Result json.RawMessage `json:"action_result"`
}

func loadFixture(t testing.TB) fixture {
	t.Helper()
	raw, err := os.ReadFile("testdata/job_start.json")
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if f.Request.IdempotencyKey == "" || f.Request.MissionID == "" || f.Request.JobID == "" || len(f.Result) == 0 {
		t.Fatalf("fixture incomplete: %+v", f.Request)
	}
	return f
}

func (f fixture) key() Key {
	return Key{
		WorkspaceID:    f.Request.Workspace.ID,
		AgentSlug:      f.Request.AgentSlug,
		Action:         f.Request.Action,
		IdempotencyKey: f.Request.IdempotencyKey,
	}
}

// request is the fixture's request with JSON-RPC id id.
func (f fixture) request(t testing.TB, id string) Request {
	return f.requestWith(t, id, f.Request.MissionID, f.Request.JobID, f.Request.Input)
}

func (f fixture) requestWith(t testing.TB, id, missionID, jobID string, input json.RawMessage) Request {
	t.Helper()
	fp, err := Fingerprint(missionID, jobID, input)
	if err != nil {
		t.Fatal(err)
	}
	return Request{Key: f.key(), Fingerprint: fp, ID: json.RawMessage(id)}
}

// withKey returns req with another idempotency key.
func withKey(req Request, k string) Request {
	req.Key.IdempotencyKey = k
	return req
}

// okBody is the agent's JSON-RPC answer carrying result for request id.
func okBody(id json.RawMessage, result json.RawMessage) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]json.RawMessage{"jsonrpc": json.RawMessage(`"2.0"`), "id": id, "result": result})
	return b
}

func okResponse(id, result json.RawMessage) Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", "123")
	h.Set("X-Agent", "interviewer")
	return Response{Status: http.StatusOK, Header: h, Body: okBody(id, result)}
}

// agent is a fake Supervaizer agent: it counts forwards and answers with
// answer (default: the fixture result, HTTP 200). If gate is set, each call
// signals started and then blocks until gate is closed.
type agent struct {
	calls   atomic.Int64
	started chan struct{}
	gate    chan struct{}

	mu     sync.Mutex
	answer func(n int64, ctx context.Context, id json.RawMessage) (Response, error)
	ctxs   []context.Context
}

func newAgent(result json.RawMessage) *agent {
	return &agent{
		started: make(chan struct{}, 1000),
		answer: func(_ int64, _ context.Context, id json.RawMessage) (Response, error) {
			return okResponse(id, result), nil
		},
	}
}

// blocking makes every call wait on a gate, returned as its release func.
func (a *agent) blocking() (release func()) {
	a.gate = make(chan struct{})
	var once sync.Once
	return func() { once.Do(func() { close(a.gate) }) }
}

func (a *agent) setAnswer(f func(n int64, ctx context.Context, id json.RawMessage) (Response, error)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answer = f
}

func (a *agent) forward(req Request) func(ctx context.Context) (Response, error) {
	return func(ctx context.Context) (Response, error) {
		n := a.calls.Add(1)
		a.mu.Lock()
		a.ctxs = append(a.ctxs, ctx)
		answer := a.answer
		a.mu.Unlock()
		a.started <- struct{}{}
		if a.gate != nil {
			<-a.gate
		}
		return answer(n, ctx, req.ID)
	}
}

func (a *agent) count() int64 { return a.calls.Load() }

// waitStarted waits until n more forwards have started.
func (a *agent) waitStarted(t testing.TB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-a.started:
		case <-time.After(patience):
			t.Fatalf("forward %d/%d did not start", i+1, n)
		}
	}
}

// backend is one store kind under test. open returns a store over the same
// data: for memory the same instance (one process), for Redis a new client on
// the same server (another replica).
type backend struct {
	name  string
	open  func(t testing.TB) Store
	srv   *redistest.Server // nil for memory
	redis bool
}

func memoryBackend(t testing.TB, opts MemoryOptions) *backend {
	st := NewMemoryStore(opts)
	t.Cleanup(func() { _ = st.Close() })
	return &backend{name: "memory", open: func(testing.TB) Store { return st }}
}

// fileBackend is a FileStore on a fresh file of t.TempDir(); like memory,
// open returns the same instance (a file store serves one process).
func fileBackend(t testing.TB, opts FileOptions) *backend {
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "idempotency.db")
	}
	st := newFile(t, opts)
	return &backend{name: "file", open: func(testing.TB) Store { return st }}
}

// newFile opens a FileStore that is closed when t ends.
func newFile(t testing.TB, opts FileOptions) *FileStore {
	t.Helper()
	st, err := NewFileStore(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func redisBackend(t testing.TB) *backend {
	srv := redistest.Start(t)
	return &backend{name: "redis", srv: srv, redis: true, open: func(t testing.TB) Store {
		return newRedis(t, RedisOptions{URL: srv.URL()})
	}}
}

func newRedis(t testing.TB, opts RedisOptions) *RedisStore {
	t.Helper()
	st, err := NewRedisStore(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// forEachStore runs f once per store kind, on a fresh backend.
func forEachStore(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("memory", func(t *testing.T) { f(t, memoryBackend(t, MemoryOptions{})) })
	t.Run("file", func(t *testing.T) { f(t, fileBackend(t, FileOptions{})) })
	t.Run("redis", func(t *testing.T) { f(t, redisBackend(t)) })
	t.Run("redis-sentinel", func(t *testing.T) { f(t, redisSentinelBackend(t)) })
}

// counters is an Observer that counts events.
type counters struct {
	forward, recorded, notRecorded, kept, replay, conflict, wait, inProgress atomic.Int64

	mu        sync.Mutex
	storeErrs []storeErr
	waitCh    chan struct{}
}

type storeErr struct {
	op  string
	err error
}

func newCounters() *counters { return &counters{waitCh: make(chan struct{}, 1000)} }

func (c *counters) observer() Observer {
	return Observer{
		Forward:     func(Key) { c.forward.Add(1) },
		Recorded:    func(Key) { c.recorded.Add(1) },
		NotRecorded: func(Key) { c.notRecorded.Add(1) },
		Kept:        func(Key, string) { c.kept.Add(1) },
		Replay:      func(Key) { c.replay.Add(1) },
		Conflict:    func(Key) { c.conflict.Add(1) },
		Wait: func(Key) {
			c.wait.Add(1)
			c.waitCh <- struct{}{}
		},
		InProgress: func(Key) { c.inProgress.Add(1) },
		StoreError: func(_ Key, op string, err error) {
			c.mu.Lock()
			c.storeErrs = append(c.storeErrs, storeErr{op, err})
			c.mu.Unlock()
		},
	}
}

func (c *counters) errs() []storeErr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]storeErr(nil), c.storeErrs...)
}

// waitWaiters waits until n Observer.Wait events have been seen.
func waitWaiters(t testing.TB, ch <-chan struct{}, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-ch:
		case <-time.After(patience):
			t.Fatalf("only %d/%d callers started to wait", i, n)
		}
	}
}

type doResult struct {
	reply Reply
	err   error
}

// goDo runs g.Do in a goroutine.
func goDo(ctx context.Context, g *Guard, req Request, fwd func(context.Context) (Response, error)) <-chan doResult {
	ch := make(chan doResult, 1)
	go func() {
		r, err := g.Do(ctx, req, fwd)
		ch <- doResult{r, err}
	}()
	return ch
}

func await(t testing.TB, ch <-chan doResult, what string) doResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(patience):
		t.Fatalf("%s: Do did not return", what)
	}
	return doResult{}
}

func mustDo(t testing.TB, g *Guard, req Request, fwd func(context.Context) (Response, error)) Reply {
	t.Helper()
	r, err := g.Do(context.Background(), req, fwd)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return r
}

// decoded is a reply body split into id and result.
type decoded struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

func decode(t testing.TB, body []byte) decoded {
	t.Helper()
	var d decoded
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("reply body not JSON: %v: %s", err, body)
	}
	return d
}

// wantBody is the exact body Do builds for id and result.
func wantBody(id string, result json.RawMessage) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + id + `,"result":` + string(result) + `}`)
}

func codeOf(err error) string {
	var e *refusal.Refusal
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// eventually polls cond every 20 ms until it holds or patience runs out.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func jsonEq(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// awaitSameResults waits for every call in results: call i must answer with
// id i (itoa(i)) and all with the same result. It returns how many replies
// were not marked replayed.
func awaitSameResults(t *testing.T, results []<-chan doResult, what string) (fresh int) {
	t.Helper()
	var result json.RawMessage
	for i, ch := range results {
		r := await(t, ch, what)
		if r.err != nil {
			t.Fatalf("call %d: %v", i, r.err)
		}
		d := decode(t, r.reply.Body)
		if string(d.ID) != itoa(i) {
			t.Fatalf("call %d: id %s", i, d.ID)
		}
		if result == nil {
			result = d.Result
		} else if !bytes.Equal(result, d.Result) {
			t.Fatalf("call %d: result differs:\n%s\n%s", i, d.Result, result)
		}
		if !r.reply.Replayed {
			fresh++
		}
	}
	return fresh
}
