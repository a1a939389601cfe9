package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

func TestReplayReturnsOriginalResult(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		// The agent's result already has a replay_safety field to keep.
		var res map[string]json.RawMessage
		_ = json.Unmarshal(f.Result, &res)
		res["replay_safety"] = json.RawMessage(`{"replay_token":"rt_1"}`)
		agentResult, _ := json.Marshal(res)

		a := newAgent(agentResult)
		c := newCounters()
		g := New(b.open(t), Options{Observer: c.observer()})

		req1 := f.request(t, `1`)
		first := mustDo(t, g, req1, a.forward(req1))
		if first.Replayed || first.Conflict || first.Status != http.StatusOK {
			t.Fatalf("first reply: %+v", first)
		}
		d := decode(t, first.Body)
		if string(d.ID) != `1` || d.JSONRPC != "2.0" {
			t.Fatalf("first envelope: %s", first.Body)
		}
		var got struct {
			Status       string            `json:"status"`
			Effects      []json.RawMessage `json:"effects"`
			ReplaySafety map[string]any    `json:"replay_safety"`
		}
		if err := json.Unmarshal(d.Result, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status != "ok" || len(got.Effects) != 2 {
			t.Fatalf("fixture result lost: %s", d.Result)
		}
		if got.ReplaySafety["strictly_idempotent_response"] != true || got.ReplaySafety["replay_token"] != "rt_1" {
			t.Fatalf("replay_safety = %v", got.ReplaySafety)
		}
		if first.Header.Get("Content-Length") != "" || first.Header.Get("X-Agent") != "interviewer" ||
			first.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("first headers: %v", first.Header)
		}

		req2 := f.request(t, `"retry-2"`)
		second := mustDo(t, g, req2, a.forward(req2))
		if !second.Replayed || second.Conflict {
			t.Fatalf("second reply: %+v", second)
		}
		if !bytes.Equal(second.Body, wantBody(`"retry-2"`, d.Result)) {
			t.Fatalf("replay body\n got %s\nwant %s", second.Body, wantBody(`"retry-2"`, d.Result))
		}
		if !bytes.Equal(first.Body, wantBody(`1`, d.Result)) {
			t.Fatalf("first body not in the replay form: %s", first.Body)
		}
		if second.Status != first.Status || !headersEqual(first.Header, second.Header) {
			t.Fatalf("replay status/headers differ: %d %v vs %d %v", second.Status, second.Header, first.Status, first.Header)
		}
		if n := a.count(); n != 1 {
			t.Fatalf("forward called %d times, want 1", n)
		}
		if c.replay.Load() != 1 || c.recorded.Load() != 1 || c.forward.Load() != 1 {
			t.Fatalf("observer: replay=%d recorded=%d forward=%d", c.replay.Load(), c.recorded.Load(), c.forward.Load())
		}
	})
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := b[k]
		if len(v) != len(w) {
			return false
		}
		for i := range v {
			if v[i] != w[i] {
				return false
			}
		}
	}
	return true
}

func TestReplayEchoesEachRequestID(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		g := New(b.open(t), Options{})
		first := f.request(t, `"first"`)
		r := mustDo(t, g, first, a.forward(first))
		result := decode(t, r.Body).Result

		for _, c := range []struct{ id, want string }{
			{`7`, `7`},
			{`"abc"`, `"abc"`},
			{`null`, `null`},
			{``, `null`},
			{` "spaced" `, `"spaced"`},
			{`"\u00e9"`, `"\u00e9"`},
		} {
			req := f.request(t, c.id)
			rep := mustDo(t, g, req, a.forward(req))
			if !rep.Replayed {
				t.Fatalf("id %q: not replayed", c.id)
			}
			if !bytes.Equal(rep.Body, wantBody(c.want, result)) {
				t.Fatalf("id %q: body %s", c.id, rep.Body)
			}
		}
		if n := a.count(); n != 1 {
			t.Fatalf("forward called %d times", n)
		}
		if _, err := g.Do(context.Background(), f.request(t, `{bad`), a.forward(first)); err == nil || codeOf(err) != "" {
			t.Fatalf("invalid id: err = %v", err)
		}
	})
}

func TestConflictOnChangedIdentity(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		c := newCounters()
		g := New(b.open(t), Options{Observer: c.observer()})
		orig := f.request(t, `1`)
		first := mustDo(t, g, orig, a.forward(orig))

		wantResult := `{"status":"error","errors":[{"code":"idempotency_conflict","message":"idempotency_key was already used with a different input, mission_id or job_id"}],"replay_safety":{"strictly_idempotent_response":true}}`
		changed := []struct {
			name string
			req  Request
		}{
			{"input", f.requestWith(t, `2`, f.Request.MissionID, f.Request.JobID, json.RawMessage(`{"campaign_id":"campaign_999"}`))},
			{"input absent", f.requestWith(t, `3`, f.Request.MissionID, f.Request.JobID, nil)},
			{"mission_id", f.requestWith(t, `4`, "mission_999", f.Request.JobID, f.Request.Input)},
			{"job_id", f.requestWith(t, `5`, f.Request.MissionID, "job_999", f.Request.Input)},
			{"job_id absent", f.requestWith(t, `"six"`, f.Request.MissionID, "", f.Request.Input)},
		}
		for i, ch := range changed {
			rep := mustDo(t, g, ch.req, a.forward(ch.req))
			if !rep.Conflict || rep.Replayed || rep.Status != http.StatusOK {
				t.Fatalf("%s: %+v", ch.name, rep)
			}
			if want := wantBody(string(ch.req.ID), json.RawMessage(wantResult)); !bytes.Equal(rep.Body, want) {
				t.Fatalf("%s: body\n got %s\nwant %s", ch.name, rep.Body, want)
			}
			if rep.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%s: headers %v", ch.name, rep.Header)
			}
			if c.conflict.Load() != int64(i+1) {
				t.Fatalf("%s: conflict count %d", ch.name, c.conflict.Load())
			}
		}
		if n := a.count(); n != 1 {
			t.Fatalf("forward called %d times, want 1", n)
		}
		// The original still replays.
		again := f.request(t, `1`)
		rep := mustDo(t, g, again, a.forward(again))
		if !rep.Replayed || !bytes.Equal(rep.Body, first.Body) {
			t.Fatalf("original after conflicts: %+v", rep)
		}
		// Other scopes are other keys: no conflict.
		for _, k := range []Key{
			{WorkspaceID: "workspace_999", AgentSlug: orig.Key.AgentSlug, Action: orig.Key.Action, IdempotencyKey: orig.Key.IdempotencyKey},
			{WorkspaceID: orig.Key.WorkspaceID, AgentSlug: "other_agent", Action: orig.Key.Action, IdempotencyKey: orig.Key.IdempotencyKey},
			{WorkspaceID: orig.Key.WorkspaceID, AgentSlug: orig.Key.AgentSlug, Action: "resource.campaigns.create", IdempotencyKey: orig.Key.IdempotencyKey},
		} {
			req := changed[0].req
			req.Key = k
			rep := mustDo(t, g, req, a.forward(req))
			if rep.Conflict || rep.Replayed {
				t.Fatalf("scope %+v: %+v", k, rep)
			}
		}
	})
}

func TestConcurrentCallsForwardOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		release := a.blocking()
		defer release()
		c := newCounters()
		g := New(b.open(t), Options{Observer: c.observer()})

		const n = 50
		results := make([]<-chan doResult, n)
		for i := 0; i < n; i++ {
			req := f.request(t, itoa(i))
			results[i] = goDo(context.Background(), g, req, a.forward(req))
		}
		a.waitStarted(t, 1)
		waitWaiters(t, c.waitCh, n-1) // every other call sees the key in flight
		release()

		fresh := awaitSameResults(t, results, "concurrent Do")
		if got := a.count(); got != 1 {
			t.Fatalf("forward called %d times, want 1", got)
		}
		if fresh != 1 {
			t.Fatalf("%d replies not marked replayed, want 1", fresh)
		}
	})
}

func TestClientGoneDuringForward(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		release := a.blocking()
		defer release()
		g := New(b.open(t), Options{UpstreamTimeout: time.Hour})

		ctx, cancel := context.WithCancel(context.Background())
		req := f.request(t, `1`)
		done := goDo(ctx, g, req, a.forward(req))
		a.waitStarted(t, 1)
		cancel() // the client goes away mid-forward

		a.mu.Lock()
		fctx := a.ctxs[0]
		a.mu.Unlock()
		if fctx.Err() != nil {
			t.Fatalf("forward ctx cancelled with the client: %v", fctx.Err())
		}
		if _, ok := fctx.Deadline(); !ok {
			t.Fatal("forward ctx has no UpstreamTimeout deadline")
		}
		release()
		r := await(t, done, "holder Do")
		if r.err != nil || r.reply.Replayed {
			t.Fatalf("holder: %+v %v", r.reply, r.err)
		}

		retry := f.request(t, `2`)
		rep := mustDo(t, g, retry, a.forward(retry))
		if !rep.Replayed {
			t.Fatal("retry after a client gone was not replayed")
		}
		if !bytes.Equal(decode(t, rep.Body).Result, decode(t, r.reply.Body).Result) {
			t.Fatal("retry result differs")
		}
		if n := a.count(); n != 1 {
			t.Fatalf("forward called %d times", n)
		}
	})
}

func TestWaiterCancelStopsOnlyItsWait(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		release := a.blocking()
		defer release()
		c := newCounters()
		g := New(b.open(t), Options{Observer: c.observer()})

		req := f.request(t, `1`)
		holder := goDo(context.Background(), g, req, a.forward(req))
		a.waitStarted(t, 1)

		ctx, cancel := context.WithCancel(context.Background())
		wreq := f.request(t, `2`)
		waiter := goDo(ctx, g, wreq, a.forward(wreq))
		waitWaiters(t, c.waitCh, 1)
		cancel()
		w := await(t, waiter, "waiter")
		if !errors.Is(w.err, context.Canceled) {
			t.Fatalf("waiter err = %v, want context.Canceled", w.err)
		}
		release()
		if h := await(t, holder, "holder"); h.err != nil {
			t.Fatal(h.err)
		}
		retry := f.request(t, `3`)
		if rep := mustDo(t, g, retry, a.forward(retry)); !rep.Replayed {
			t.Fatal("not replayed after the holder finished")
		}
		if n := a.count(); n != 1 {
			t.Fatalf("forward called %d times", n)
		}
	})
}

func TestNonDefinitiveAnswersAreNotRecorded(t *testing.T) {
	bad := []struct {
		name string
		resp func(id json.RawMessage) Response
	}{
		{"http 500", func(json.RawMessage) Response {
			return Response{Status: 500, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("upstream exploded")}
		}},
		{"http 503 with a result", func(id json.RawMessage) Response {
			return Response{Status: 503, Body: okBody(id, json.RawMessage(`{"status":"ok"}`))}
		}},
		{"json-rpc error", func(id json.RawMessage) Response {
			return Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}},
				Body: []byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":-32603,"message":"handler failed"}}`)}
		}},
	}
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		c := newCounters()
		g := New(b.open(t), Options{Observer: c.observer()})
		for i, bc := range bad {
			a := newAgent(f.Result)
			a.setAnswer(func(n int64, _ context.Context, id json.RawMessage) (Response, error) {
				if n == 1 {
					return bc.resp(id), nil
				}
				return okResponse(id, f.Result), nil
			})
			req := withKey(f.request(t, `1`), "idem-"+itoa(i))
			want := bc.resp(req.ID)
			first := mustDo(t, g, req, a.forward(req))
			if first.Replayed || first.Conflict || first.Status != want.Status ||
				!bytes.Equal(first.Body, want.Body) || !headersEqual(first.Header, want.Header) {
				t.Fatalf("%s: not passed through unchanged: %+v", bc.name, first)
			}
			second := mustDo(t, g, withKey(f.request(t, `2`), "idem-"+itoa(i)), a.forward(req))
			if second.Replayed {
				t.Fatalf("%s: the non-definitive answer was recorded", bc.name)
			}
			if a.count() != 2 {
				t.Fatalf("%s: forward called %d times, want 2", bc.name, a.count())
			}
			third := mustDo(t, g, withKey(f.request(t, `3`), "idem-"+itoa(i)), a.forward(req))
			if !third.Replayed || !jsonEq(decode(t, third.Body).Result, decode(t, second.Body).Result) {
				t.Fatalf("%s: the definitive retry was not recorded", bc.name)
			}
		}
		if c.notRecorded.Load() != int64(len(bad)) {
			t.Fatalf("NotRecorded = %d, want %d", c.notRecorded.Load(), len(bad))
		}
	})
}

// TestForwardErrorKeepsKey: a forward error that may have reached the agent
// (a reset, EOF, timeout) keeps the key in flight: the retry waits and gets
// idempotency_in_progress, the agent runs the call once.
func TestForwardErrorKeepsKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		reset := errors.New("read tcp 127.0.0.1:1: connection reset by peer")
		a.setAnswer(func(n int64, _ context.Context, id json.RawMessage) (Response, error) {
			if n == 1 {
				return Response{}, reset
			}
			return okResponse(id, f.Result), nil
		})
		c := newCounters()
		g := New(b.open(t), Options{WaitTimeout: 100 * time.Millisecond, Observer: c.observer()})
		req := f.request(t, `1`)
		if _, err := g.Do(context.Background(), req, a.forward(req)); !errors.Is(err, reset) {
			t.Fatalf("err = %v, want the forward's error", err)
		}
		if _, err := g.Do(context.Background(), req, a.forward(req)); codeOf(err) != CodeInProgress {
			t.Fatalf("retry: %v, want %s", err, CodeInProgress)
		}
		if a.count() != 1 || c.kept.Load() != 1 || c.notRecorded.Load() != 0 {
			t.Fatalf("forwards %d, kept %d, notRecorded %d", a.count(), c.kept.Load(), c.notRecorded.Load())
		}
	})
}

// TestNotSentReleasesKey: a forward error wrapping ErrNotSent (a dial error)
// releases the key: the retry forwards again.
func TestNotSentReleasesKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		refused := fmt.Errorf("%w: dial tcp 127.0.0.1:1: connection refused", ErrNotSent)
		a.setAnswer(func(n int64, _ context.Context, id json.RawMessage) (Response, error) {
			if n == 1 {
				return Response{}, refused
			}
			return okResponse(id, f.Result), nil
		})
		g := New(b.open(t), Options{})
		req := f.request(t, `1`)
		if _, err := g.Do(context.Background(), req, a.forward(req)); !errors.Is(err, ErrNotSent) {
			t.Fatalf("err = %v, want the forward's error", err)
		}
		if rep := mustDo(t, g, req, a.forward(req)); rep.Replayed {
			t.Fatal("replayed after a dial failure")
		}
		if a.count() != 2 {
			t.Fatalf("forward called %d times", a.count())
		}
	})
}

// TestForwardPanicKeepsKey: a panicking forward (reverse_proxy aborts with
// http.ErrAbortHandler when the agent's body is cut short) keeps the key in
// flight; the panic continues.
func TestForwardPanicKeepsKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		c := newCounters()
		g := New(b.open(t), Options{WaitTimeout: 100 * time.Millisecond, Observer: c.observer()})
		req := f.request(t, `1`)
		func() {
			defer func() {
				if r := recover(); r != "agent glue bug" {
					t.Fatalf("recovered %v", r)
				}
			}()
			_, _ = g.Do(context.Background(), req, func(context.Context) (Response, error) { panic("agent glue bug") })
		}()
		if _, err := g.Do(context.Background(), req, a.forward(req)); codeOf(err) != CodeInProgress || a.count() != 0 {
			t.Fatalf("after a panic: %v, %d forwards", err, a.count())
		}
		if c.kept.Load() != 1 {
			t.Fatalf("Kept = %d", c.kept.Load())
		}
	})
}

// TestUnrecordedAnswersKeepKey: an answer the forward passed through itself
// (too large to record), one the gate cannot read (encoded), and one that is
// neither a result nor a declared failure (the call may have run: a 2xx
// other than 200, a well-framed but cut JSON answer, a result that is not
// an object, an "error" that is not an error object, a member given twice)
// are not recorded and keep the key in flight; all but the first are
// returned as they came.
func TestUnrecordedAnswersKeepKey(t *testing.T) {
	for name, resp := range map[string]Response{
		"passed through":       {Status: 200, Header: http.Header{}, PassedThrough: true},
		"unreadable":           {Status: 200, Header: http.Header{"Content-Encoding": {"br"}}, Body: []byte("\x1b"), Unreadable: true},
		"cut json":             {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","res`)},
		"no result":            {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1}`)},
		"result not an object": {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":"ok"}`)},
		"result null":          {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":null}`)},
		"202 accepted":         {Status: 202, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)},
		"201 created":          {Status: 201, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)},
		"204 no content":       {Status: 204, Header: http.Header{}},
		"error false":          {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{},"error":false}`)},
		"error {}":             {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{},"error":{}}`)},
		"error code not int":   {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}`)},
		"error given twice":    {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1},"error":null}`)},
		"result given twice":   {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{"a":1,"a":2}}`)},
		"result and error":     {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":-32603,"message":"x"}}`)},
		"escaped error name":   {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{},"err\u006fr":{"code":1}}`)},
		"error CODE":           {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"error":{"CODE":1}}`)},
		"error code string":    {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"error":{"code":"-32000"}}`)},
		"error code fraction":  {Status: 200, Header: http.Header{}, Body: []byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32000.0}}`)},
	} {
		t.Run(name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, b *backend) {
				f := loadFixture(t)
				a := newAgent(f.Result)
				c := newCounters()
				g := New(b.open(t), Options{WaitTimeout: 100 * time.Millisecond, Observer: c.observer()})
				req := f.request(t, `1`)
				rep, err := g.Do(context.Background(), req, func(context.Context) (Response, error) { return resp, nil })
				if err != nil || rep.PassedThrough != resp.PassedThrough || !bytes.Equal(rep.Body, resp.Body) ||
					rep.Header.Get("Content-Encoding") != resp.Header.Get("Content-Encoding") {
					t.Fatalf("reply %+v, %v", rep, err)
				}
				if _, err := g.Do(context.Background(), req, a.forward(req)); codeOf(err) != CodeInProgress || a.count() != 0 {
					t.Fatalf("retry: %v, %d forwards", err, a.count())
				}
				if c.kept.Load() != 1 {
					t.Fatalf("Kept = %d", c.kept.Load())
				}
			})
		})
	}
}

func TestWaiterForwardsAfterHolderReleases(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		a.setAnswer(func(n int64, _ context.Context, id json.RawMessage) (Response, error) {
			if n == 1 {
				return Response{Status: 502, Body: []byte("bad gateway")}, nil
			}
			return okResponse(id, f.Result), nil
		})
		release := a.blocking()
		defer release()
		c := newCounters()
		g := New(b.open(t), Options{Observer: c.observer()})

		req := f.request(t, `1`)
		holder := goDo(context.Background(), g, req, a.forward(req))
		a.waitStarted(t, 1)
		wreq := f.request(t, `2`)
		waiter := goDo(context.Background(), g, wreq, a.forward(wreq))
		waitWaiters(t, c.waitCh, 1)
		release() // the holder's answer is a 502: released, the waiter takes over

		h := await(t, holder, "holder")
		if h.err != nil || h.reply.Status != 502 {
			t.Fatalf("holder: %+v %v", h.reply, h.err)
		}
		w := await(t, waiter, "waiter")
		if w.err != nil || w.reply.Replayed || w.reply.Status != 200 {
			t.Fatalf("waiter: %+v %v", w.reply, w.err)
		}
		if string(decode(t, w.reply.Body).ID) != `2` {
			t.Fatalf("waiter id: %s", w.reply.Body)
		}
		if a.count() != 2 {
			t.Fatalf("forward called %d times, want 2", a.count())
		}
	})
}

func TestWaitTimeoutIsInProgress(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		release := a.blocking()
		defer release()
		holderGuard := New(b.open(t), Options{})
		c := newCounters()
		impatient := New(b.open(t), Options{WaitTimeout: 300 * time.Millisecond, Observer: c.observer()})

		req := f.request(t, `1`)
		holder := goDo(context.Background(), holderGuard, req, a.forward(req))
		a.waitStarted(t, 1)

		wreq := f.request(t, `2`)
		w := await(t, goDo(context.Background(), impatient, wreq, a.forward(wreq)), "waiter")
		var e *refusal.Refusal
		if !errors.As(w.err, &e) || e.Code != CodeInProgress {
			t.Fatalf("err = %v, want %s", w.err, CodeInProgress)
		}
		if c.inProgress.Load() != 1 || c.wait.Load() != 1 {
			t.Fatalf("observer: inProgress=%d wait=%d", c.inProgress.Load(), c.wait.Load())
		}
		release()
		if h := await(t, holder, "holder"); h.err != nil {
			t.Fatal(h.err)
		}
		if a.count() != 1 {
			t.Fatalf("forward called %d times", a.count())
		}
		if rep := mustDo(t, impatient, wreq, a.forward(wreq)); !rep.Replayed {
			t.Fatal("retry after in_progress not replayed")
		}
	})
}

func TestRecordExpiresAfterTTL(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		g := New(b.open(t), Options{TTL: 300 * time.Millisecond})
		req := f.request(t, `1`)
		mustDo(t, g, req, a.forward(req))
		eventually(t, "the record to expire", func() bool {
			return !mustDo(t, g, req, a.forward(req)).Replayed
		})
		if a.count() != 2 {
			t.Fatalf("forward called %d times, want 2", a.count())
		}
	})
}

func TestLockTTLFreesCrashedHolder(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		st := b.open(t)
		req := f.request(t, `1`)
		// A holder that claimed and crashed: it never records nor releases.
		cr, err := st.Claim(context.Background(), req.Key.ID(), 300*time.Millisecond)
		if err != nil || cr.State != StateClaimed {
			t.Fatalf("claim: %+v %v", cr, err)
		}
		c := newCounters()
		g := New(b.open(t), Options{Observer: c.observer()})
		rep := mustDo(t, g, req, a.forward(req))
		if rep.Replayed || a.count() != 1 || c.wait.Load() != 1 {
			t.Fatalf("reply %+v, forwards %d, waits %d", rep, a.count(), c.wait.Load())
		}
		// The crashed holder's token is fenced off.
		if err := st.Record(context.Background(), req.Key.ID(), cr.Token, Record{Fingerprint: "x", Status: 200, Result: json.RawMessage(`{}`)}, time.Hour); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("stale Record: %v", err)
		}
		if again := mustDo(t, g, req, a.forward(req)); !again.Replayed || !bytes.Equal(decode(t, again.Body).Result, decode(t, rep.Body).Result) {
			t.Fatal("stale holder overwrote the record")
		}
	})
}

func TestFencingLostClaimCannotRecord(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		a.setAnswer(func(n int64, _ context.Context, id json.RawMessage) (Response, error) {
			return okResponse(id, json.RawMessage(`{"status":"ok","by":"call-`+itoa(int(n))+`"}`)), nil
		})
		gateA := make(chan struct{})
		ca := newCounters()
		gA := New(b.open(t), Options{LockTTL: 300 * time.Millisecond, Observer: ca.observer()})
		gB := New(b.open(t), Options{LockTTL: time.Minute})

		req := f.request(t, `"A"`)
		startedA := make(chan struct{})
		slowA := func(ctx context.Context) (Response, error) {
			close(startedA)
			<-gateA // outlives its 300 ms mark
			return a.forward(req)(ctx)
		}
		holderA := goDo(context.Background(), gA, req, slowA)
		<-startedA

		// B waits for A's mark to expire, claims, forwards and records.
		reqB := f.request(t, `"B"`)
		rb := await(t, goDo(context.Background(), gB, reqB, a.forward(reqB)), "B")
		if rb.err != nil || rb.reply.Replayed {
			t.Fatalf("B: %+v %v", rb.reply, rb.err)
		}
		close(gateA)
		ra := await(t, holderA, "A")
		if ra.err != nil {
			t.Fatalf("A: %v", ra.err)
		}
		lost := false
		for _, e := range ca.errs() {
			if e.op == "record" && errors.Is(e.err, ErrClaimLost) {
				lost = true
			}
		}
		if !lost || ca.recorded.Load() != 0 {
			t.Fatalf("A recorded despite a lost claim: errs=%v recorded=%d", ca.errs(), ca.recorded.Load())
		}
		// B's record stands.
		retry := f.request(t, `"C"`)
		rep := mustDo(t, gB, retry, a.forward(retry))
		if !rep.Replayed || !bytes.Equal(decode(t, rep.Body).Result, decode(t, rb.reply.Body).Result) {
			t.Fatalf("record is not B's: %s vs %s", rep.Body, rb.reply.Body)
		}
	})
}

func TestInvalidRequests(t *testing.T) {
	f := loadFixture(t)
	g := New(nil, Options{})
	a := newAgent(f.Result)
	for name, req := range map[string]Request{
		"no key":         withKey(f.request(t, `1`), ""),
		"no fingerprint": {Key: f.key(), ID: json.RawMessage(`1`)},
		"bad id":         f.request(t, `[1,`),
	} {
		_, err := g.Do(context.Background(), req, a.forward(req))
		if err == nil || codeOf(err) != "" {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if a.count() != 0 {
		t.Fatal("forward called for an invalid request")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := f.request(t, `1`)
	if _, err := g.Do(ctx, req, a.forward(req)); !errors.Is(err, context.Canceled) || a.count() != 0 {
		t.Fatalf("cancelled ctx: %v, %d forwards", err, a.count())
	}
}

// Store-level contract, for both stores.

func TestStoreWaitIsWokenByRecordAndRelease(t *testing.T) {
	for _, end := range []string{"record", "release"} {
		t.Run(end, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, b *backend) {
				var st Store
				if b.redis {
					// A re-check period far beyond the test's patience: only the
					// pub/sub message can end the wait in time.
					st = newRedis(t, RedisOptions{URL: b.srv.URL(), RecheckInterval: time.Hour})
				} else {
					st = b.open(t)
				}
				ctx := context.Background()
				cr, err := st.Claim(ctx, "id1", time.Hour)
				if err != nil || cr.State != StateClaimed {
					t.Fatalf("%+v %v", cr, err)
				}
				if cr2, _ := st.Claim(ctx, "id1", time.Hour); cr2.State != StateInFlight {
					t.Fatalf("second claim: %v", cr2.State)
				}
				var wg sync.WaitGroup
				woke := make(chan error, 3)
				for i := 0; i < 3; i++ {
					wg.Add(1)
					go func() { defer wg.Done(); woke <- st.Wait(ctx, "id1") }()
				}
				// Give the waiters no head start guarantee: Wait must handle
				// an end that happens before or after it subscribes.
				if end == "record" {
					err = st.Record(ctx, "id1", cr.Token, Record{Fingerprint: "fp", Status: 200, Result: json.RawMessage(`{"a":1}`)}, time.Hour)
				} else {
					err = st.Release(ctx, "id1", cr.Token)
				}
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 3; i++ {
					select {
					case err := <-woke:
						if err != nil {
							t.Fatalf("Wait: %v", err)
						}
					case <-time.After(patience):
						t.Fatal("Wait was not woken")
					}
				}
				wg.Wait()
				after, err := st.Claim(ctx, "id1", time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if end == "record" && (after.State != StateRecorded || after.Record.Fingerprint != "fp" || string(after.Record.Result) != `{"a":1}`) {
					t.Fatalf("after record: %+v", after)
				}
				if end == "release" && after.State != StateClaimed {
					t.Fatalf("after release: %v", after.State)
				}
			})
		})
	}
}

func TestStoreFencing(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		st := b.open(t)
		ctx := context.Background()
		a, err := st.Claim(ctx, "id", 200*time.Millisecond)
		if err != nil || a.State != StateClaimed {
			t.Fatalf("%+v %v", a, err)
		}
		rec := func(fp string) Record {
			return Record{Fingerprint: fp, Status: 200, Header: http.Header{"X": {"1"}}, Result: json.RawMessage(`{"by":"` + fp + `"}`)}
		}
		// A wrong token is refused while the mark is live.
		if err := st.Record(ctx, "id", "not-the-token", rec("x"), time.Hour); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("wrong token Record: %v", err)
		}
		if err := st.Release(ctx, "id", "not-the-token"); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("wrong token Release: %v", err)
		}
		// After A's mark expires, B claims.
		var bcl ClaimResult
		eventually(t, "A's mark to expire", func() bool {
			bcl, err = st.Claim(ctx, "id", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			return bcl.State == StateClaimed
		})
		if bcl.Token == a.Token {
			t.Fatal("token reused")
		}
		if err := st.Record(ctx, "id", a.Token, rec("A"), time.Hour); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("stale Record: %v", err)
		}
		if err := st.Release(ctx, "id", a.Token); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("stale Release: %v", err)
		}
		if cl, _ := st.Claim(ctx, "id", time.Hour); cl.State != StateInFlight {
			t.Fatalf("B's mark lost: %v", cl.State)
		}
		if err := st.Record(ctx, "id", bcl.Token, rec("B"), time.Hour); err != nil {
			t.Fatal(err)
		}
		got, err := st.Claim(ctx, "id", time.Hour)
		if err != nil || got.State != StateRecorded || got.Record.Fingerprint != "B" || got.Record.Header.Get("X") != "1" {
			t.Fatalf("%+v %v", got, err)
		}
		// A recorded key cannot be released or re-recorded by B's old token.
		if err := st.Release(ctx, "id", bcl.Token); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("Release after Record: %v", err)
		}
		if err := st.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestConflictingRequestWaitsForTheHolder(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *backend) {
		f := loadFixture(t)
		a := newAgent(f.Result)
		release := a.blocking()
		defer release()
		c := newCounters()
		g := New(b.open(t), Options{Observer: c.observer()})

		req := f.request(t, `1`)
		holder := goDo(context.Background(), g, req, a.forward(req))
		a.waitStarted(t, 1)
		other := f.requestWith(t, `2`, f.Request.MissionID, "job_other", f.Request.Input)
		conflicting := goDo(context.Background(), g, other, a.forward(other))
		waitWaiters(t, c.waitCh, 1)
		release()

		if h := await(t, holder, "holder"); h.err != nil || h.reply.Replayed {
			t.Fatalf("holder: %+v %v", h.reply, h.err)
		}
		r := await(t, conflicting, "conflicting")
		if r.err != nil || !r.reply.Conflict {
			t.Fatalf("conflicting request: %+v %v", r.reply, r.err)
		}
		if a.count() != 1 {
			t.Fatalf("forwards = %d", a.count())
		}
	})
}
