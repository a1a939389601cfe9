package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/hop"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// Guard defaults.
const (
	DefaultTTL             = 24 * time.Hour
	DefaultLockTTL         = 2 * time.Minute
	DefaultWaitTimeout     = 30 * time.Second
	DefaultUpstreamTimeout = 60 * time.Second

	// storeOpTimeout bounds the store calls that run detached from the
	// caller's cancellation: Claim (so a cancel cannot lose the reply of a
	// claim that succeeded) and Record/Release after a forward. The stores'
	// own timeouts are normally shorter.
	storeOpTimeout = 10 * time.Second
)

// Options configures a Guard. Zero or negative durations take the defaults.
type Options struct {
	// TTL is how long a record answers retries (default 24 h).
	TTL time.Duration
	// LockTTL is how long an in-flight mark lives if its holder never records
	// or releases it (a crashed replica), default 2 min. Keep it longer than
	// UpstreamTimeout plus the store latency: a forward that outlives its mark
	// can no longer record (fencing, see Do).
	LockTTL time.Duration
	// WaitTimeout bounds how long Do waits for another in-flight request with
	// the same Key before failing with CodeInProgress (default 30 s).
	WaitTimeout time.Duration
	// UpstreamTimeout bounds the forward; its ctx is detached from the
	// caller's cancellation (default 60 s).
	UpstreamTimeout time.Duration
	// Observer receives events for metrics and logs; nil funcs are skipped.
	Observer Observer
}

// Observer is a set of optional callbacks, called synchronously from Do (keep
// them cheap and non-blocking). The Key carries client-chosen strings
// (IdempotencyKey): do not use it as a metric label as is.
type Observer struct {
	// Forward: this call holds the key and calls forward.
	Forward func(k Key)
	// Recorded: the agent's answer was definitive and is now recorded.
	Recorded func(k Key)
	// NotRecorded: the agent's answer was not definitive (non-200, JSON-RPC
	// error, unparsable body), or the request provably never left the sidecar
	// (ErrNotSent); the key was released.
	NotRecorded func(k Key)
	// Kept: the call may have reached the agent but nothing was recorded;
	// the key stays in flight until LockTTL (see Do). reason is one of the
	// Kept* constants.
	Kept func(k Key, reason string)
	// Replay: answered from a record without forwarding.
	Replay func(k Key)
	// Conflict: the key was recorded with another fingerprint.
	Conflict func(k Key)
	// Wait: the key was in flight; this call started to wait (once per Do).
	Wait func(k Key)
	// InProgress: the wait ended by WaitTimeout (Do returns CodeInProgress).
	InProgress func(k Key)
	// ShareFull: the claim was refused because the key's workspace holds
	// its whole entries share (ShareFullError; Do fails with
	// CodeStoreUnavailable, Reason ReasonShareFull). The store answered:
	// StoreError is not called.
	ShareFull func(k Key)
	// StoreError: a store call failed. op is "claim", "wait", "record" or
	// "release". For "claim" and "wait" Do fails with CodeStoreUnavailable;
	// for "record" and "release" (after the forward) the agent's answer is
	// still returned and err may be ErrClaimLost.
	StoreError func(k Key, op string, err error)
}

// Request is one call covered by idempotency, after authorization.
type Request struct {
	// Key is the scope; Key.IdempotencyKey must not be empty (the gate does
	// not call Do for a request without idempotency_key).
	Key Key
	// Fingerprint is Fingerprint(mission_id, job_id, input) of this request.
	Fingerprint string
	// ID is the raw JSON of this request's JSON-RPC id (a string, number or
	// null); empty means null. Every reply built by Do carries it.
	ID json.RawMessage
}

// Response is what the agent answered to the forwarded request.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// PassedThrough is set by a forward that already wrote the answer to
	// the client itself, because it was larger than the gate's record bound
	// (max_record_bytes): Body is then empty, nothing is recorded and the
	// key stays in flight until LockTTL (Kept with KeptTooLarge).
	PassedThrough bool
	// Unreadable is set by a forward whose answer the gate cannot read (an
	// encoded body): it is returned unchanged, not recorded, and the key
	// stays in flight until LockTTL (Kept with KeptUnreadable), since it may
	// be a success as well as a failure.
	Unreadable bool
}

// Reply is what the gate sends to the client.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
	// Replayed is true when Body was built from a record without forwarding
	// (the gate adds X-Supervaize-Idempotent-Replay: true).
	Replayed bool
	// Conflict is true for the idempotency_conflict result.
	Conflict bool
	// PassedThrough is true when the forward already wrote the answer to
	// the client (Response.PassedThrough): the gate writes nothing more.
	PassedThrough bool
}

// Guard applies the v2 idempotent-confirm rules to calls sharing a Key. One
// Guard per store; safe for concurrent use.
type Guard struct {
	store Store
	opts  Options
}

// New returns a Guard over store (a new default MemoryStore if store is nil)
// with opts (defaults filled in).
func New(store Store, opts Options) *Guard {
	if store == nil {
		store = NewMemoryStore(MemoryOptions{})
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.LockTTL <= 0 {
		opts.LockTTL = DefaultLockTTL
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	if opts.UpstreamTimeout <= 0 {
		opts.UpstreamTimeout = DefaultUpstreamTimeout
	}
	return &Guard{store: store, opts: opts}
}

// Store returns the Guard's store (for Ping and Close).
func (g *Guard) Store() Store { return g.store }

// Do answers one covered request (seed "Idempotency", rules for job.start):
//
//   - Key recorded with the same Fingerprint: no forward; Reply is the
//     recorded status, headers and result in an envelope
//     {"jsonrpc":"2.0","id":<req.ID>,"result":<recorded result>}, Replayed.
//   - Key recorded with another Fingerprint: no forward; Reply is HTTP 200
//     with result {"status":"error","errors":[{"code":"idempotency_conflict",
//     "message":...}],"replay_safety":{"strictly_idempotent_response":true}},
//     Conflict.
//   - Key in flight (another call, in this process or another replica, is
//     forwarding it): wait, then decide again from the record; if the holder
//     released the key the waiter claims it and forwards itself. The wait is
//     bounded by WaitTimeout: then a refusal CodeInProgress. If ctx ends first,
//     Do returns ctx.Err().
//   - Key free: claim it and call forward once, with a ctx detached from ctx's
//     cancellation (context.WithoutCancel) and bounded by UpstreamTimeout, so
//     a client that goes away does not abort the agent call. Do returns only
//     when forward has returned, even if ctx is cancelled meanwhile. forward
//     must use the ctx it is given.
//
// After the forward (holder only):
//
//   - A definitive answer (HTTP 200, JSON body whose "result" is an object
//     and with no non-null "error") is rewritten: the result gets
//     replay_safety.strictly_idempotent_response = true (other replay_safety
//     fields kept, the object created if absent or not an object; object
//     keys re-serialized in sorted order). It is recorded for TTL and
//     returned in the same envelope as a replay (Replayed false), so every
//     answer to one key is byte-identical except the id. Headers of the
//     record and of every reply: the agent's, without the hop-by-hop
//     headers, Content-Length, Date and Set-Cookie (hop.RemoveFromCopy; the
//     gate sets Content-Length from Body).
//   - An answer by which the agent said the call did not succeed (a status
//     of 300 or more, a JSON-RPC error object) is returned unchanged and the
//     key is released, so a retry forwards again.
//   - Any other answer (a 2xx other than 200, a body that is not a strict
//     JSON object, no result, a result that is not an object, an "error"
//     that is not an error object; classifyAnswer) is returned unchanged
//     and the key stays in flight (Kept with KeptUnrecognized): the call may
//     have run.
//
// "Was it sent?" has one rule (docs/idempotency.md): the key is released
// after a forward only when the agent answered (above) or when forward's
// error wraps ErrNotSent (the request provably never left the sidecar: a
// dial error). Every other outcome may have reached the agent, so the key
// stays in flight until LockTTL and retries in that window wait, then get
// CodeInProgress; nothing is executed twice:
//
//   - forward returns any other error (reset, EOF, timeout, a 5xx made by
//     the transport): Do returns that error unchanged (the gate answers
//     502/504), Kept with KeptOutcomeUnknown;
//   - forward panics: the panic continues, Kept with KeptPanic;
//   - the answer was passed through (Response.PassedThrough, too large to
//     record): Reply.PassedThrough, Kept with KeptTooLarge;
//   - the answer cannot be read (Response.Unreadable): returned unchanged,
//     Kept with KeptUnreadable;
//   - recording fails (store down, not replicated, record too large,
//     ErrClaimLost because the mark outlived LockTTL and another holder
//     took it): the rewritten answer is still returned, Observer.StoreError
//     is told, Kept with KeptRecordFailed. After ErrClaimLost the other
//     holder's record answers later retries.
//
// Errors: a refusal with CodeStoreUnavailable when the store fails before the
// forward (fail closed: nothing forwarded); a refusal with CodeInProgress on
// WaitTimeout; ctx.Err() when ctx ends while claiming or waiting; forward's
// own error; a plain error for an invalid Request (empty IdempotencyKey or
// Fingerprint, ID not valid JSON): a caller bug.
func (g *Guard) Do(ctx context.Context, req Request, forward func(ctx context.Context) (Response, error)) (Reply, error) {
	if req.Key.IdempotencyKey == "" {
		return Reply{}, errors.New("idempotency: Do called without an idempotency key")
	}
	if req.Fingerprint == "" {
		return Reply{}, errors.New("idempotency: Do called without a fingerprint")
	}
	id, err := compactID(req.ID)
	if err != nil {
		return Reply{}, err
	}
	req.ID = id
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	if s, ok := g.store.(*Shared); ok {
		defer s.Begin()() // a reload does not close the store under this call (shared.go)
	}
	sid := req.Key.ID()
	obs := &g.opts.Observer

	waitCtx, cancel := context.WithTimeout(ctx, g.opts.WaitTimeout)
	defer cancel()
	waited := false
	for {
		c, err := g.claim(ctx, sid, req.Key.WorkspaceID)
		if err != nil {
			return Reply{}, g.waitError(ctx, waitCtx, req.Key, waited, "claim", err)
		}
		switch c.State {
		case StateRecorded:
			if c.Record.Fingerprint != req.Fingerprint {
				if obs.Conflict != nil {
					obs.Conflict(req.Key)
				}
				return conflictReply(req.ID), nil
			}
			if obs.Replay != nil {
				obs.Replay(req.Key)
			}
			r := recordReply(req.ID, c.Record)
			r.Replayed = true
			return r, nil
		case StateClaimed:
			if err := ctx.Err(); err != nil {
				// The client left while we claimed: nothing was forwarded.
				g.release(ctx, req.Key, sid, c.Token)
				return Reply{}, err
			}
			return g.forward(ctx, req, sid, c.Token, forward)
		case StateInFlight:
			if !waited {
				waited = true
				if obs.Wait != nil {
					obs.Wait(req.Key)
				}
			}
			if err := g.store.Wait(waitCtx, sid); err != nil {
				return Reply{}, g.waitError(ctx, waitCtx, req.Key, waited, "wait", err)
			}
		default:
			return Reply{}, g.waitError(ctx, waitCtx, req.Key, waited, "claim",
				fmt.Errorf("store returned unknown claim state %d", c.State))
		}
	}
}

// claim calls Store.Claim detached from ctx's cancellation: a claim whose
// reply was lost to a cancel would leave a mark nobody releases until LockTTL.
func (g *Guard) claim(ctx context.Context, sid, workspace string) (ClaimResult, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeOpTimeout)
	defer cancel()
	if gs, ok := g.store.(GroupClaimer); ok {
		return gs.ClaimGroup(cctx, sid, workspace, g.opts.LockTTL)
	}
	return g.store.Claim(cctx, sid, g.opts.LockTTL)
}

// GroupClaimer is a Store that bounds each group's share (MemoryStore,
// FileStore, RedisStore): the Guard claims in the group of the key's
// verified workspace, and Record charges the record to that group. A
// wrapper of such a store must implement it too, or every caller would
// share one group.
type GroupClaimer interface {
	ClaimGroup(ctx context.Context, id, group string, lockTTL time.Duration) (ClaimResult, error)
}

// release gives a claim back, detached from ctx's cancellation; a failure is
// only reported (the mark then ends at LockTTL).
func (g *Guard) release(ctx context.Context, k Key, sid, token string) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeOpTimeout)
	defer cancel()
	if err := g.store.Release(sctx, sid, token); err != nil && g.opts.Observer.StoreError != nil {
		g.opts.Observer.StoreError(k, "release", err)
	}
}

// waitError maps an error met while claiming or waiting.
func (g *Guard) waitError(ctx, waitCtx context.Context, k Key, waited bool, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	obs := &g.opts.Observer
	if waited && waitCtx.Err() != nil {
		if obs.InProgress != nil {
			obs.InProgress(k)
		}
		return errInProgress(nil)
	}
	var full *ShareFullError
	if errors.As(err, &full) {
		// The store answered: this workspace holds its share. Not a
		// store failure (readiness, store_error) but its own refusal.
		if obs.ShareFull != nil {
			obs.ShareFull(k)
		}
		return errShareFull(full)
	}
	if obs.StoreError != nil {
		obs.StoreError(k, op, err)
	}
	if e := refusal.As(err); e != nil {
		return e
	}
	return errStoreUnavailable(err)
}

// Reasons given to Observer.Kept.
const (
	KeptOutcomeUnknown = "outcome_unknown" // forward failed after the request may have left
	KeptPanic          = "panic"           // forward panicked (e.g. http.ErrAbortHandler)
	KeptTooLarge       = "too_large"       // the answer was passed through, not recorded
	KeptUnreadable     = "unreadable"      // the answer could not be read (encoded), not recorded
	KeptUnrecognized   = "unrecognized"    // neither a result nor a declared failure (classifyAnswer)
	KeptRecordFailed   = "record_failed"   // the answer could not be recorded
)

// forward runs the holder's path: forward, then record, release or keep.
func (g *Guard) forward(ctx context.Context, req Request, sid, token string, forward func(ctx context.Context) (Response, error)) (Reply, error) {
	obs := &g.opts.Observer
	detached := context.WithoutCancel(ctx)
	settled := false
	defer func() {
		if !settled { // forward panicked: it may have reached the agent
			g.kept(req.Key, KeptPanic)
		}
	}()

	if obs.Forward != nil {
		obs.Forward(req.Key)
	}
	fctx, cancel := context.WithTimeout(detached, g.opts.UpstreamTimeout)
	resp, ferr := forward(fctx)
	cancel()
	settled = true
	switch {
	case ferr != nil && errors.Is(ferr, ErrNotSent):
		g.releaseNotRecorded(ctx, req.Key, sid, token)
		return Reply{}, ferr
	case ferr != nil:
		g.kept(req.Key, KeptOutcomeUnknown)
		return Reply{}, ferr
	case resp.PassedThrough:
		g.kept(req.Key, KeptTooLarge)
		return Reply{Status: resp.Status, Header: resp.Header, PassedThrough: true}, nil
	case resp.Unreadable:
		g.kept(req.Key, KeptUnreadable)
		return Reply{Status: resp.Status, Header: resp.Header, Body: resp.Body}, nil
	}
	result, verdict := classifyAnswer(resp)
	switch verdict {
	case answerFailed:
		g.releaseNotRecorded(ctx, req.Key, sid, token)
		return Reply{Status: resp.Status, Header: resp.Header, Body: resp.Body}, nil
	case answerUnrecognized:
		g.kept(req.Key, KeptUnrecognized)
		return Reply{Status: resp.Status, Header: resp.Header, Body: resp.Body}, nil
	}
	rec := &Record{
		Fingerprint: req.Fingerprint,
		Status:      resp.Status,
		Header:      replyHeader(resp.Header),
		Result:      result,
	}
	sctx, scancel := context.WithTimeout(detached, storeOpTimeout)
	defer scancel()
	if err := g.store.Record(sctx, sid, token, *rec, g.opts.TTL); err != nil {
		if obs.StoreError != nil {
			obs.StoreError(req.Key, "record", err)
		}
		g.kept(req.Key, KeptRecordFailed)
	} else if obs.Recorded != nil {
		obs.Recorded(req.Key)
	}
	return recordReply(req.ID, rec), nil
}

// releaseNotRecorded releases the key after an answer that is not recorded
// (or a forward that was never sent) and tells the Observer.
func (g *Guard) releaseNotRecorded(ctx context.Context, k Key, sid, token string) {
	g.release(ctx, k, sid, token)
	if g.opts.Observer.NotRecorded != nil {
		g.opts.Observer.NotRecorded(k)
	}
}

// kept tells the Observer that the key stays in flight until LockTTL.
func (g *Guard) kept(k Key, reason string) {
	if g.opts.Observer.Kept != nil {
		g.opts.Observer.Kept(k, reason)
	}
}

// answerVerdict is what an answer of the agent says of the call.
type answerVerdict int

const (
	answerResult       answerVerdict = iota // a definitive result: recorded
	answerFailed                            // the agent said the call failed: the key is released
	answerUnrecognized                      // neither: kept (the call may have run)
)

// classifyAnswer reads resp: answerResult, with the rewritten result, for
// HTTP 200 with a strict JSON object body (no duplicate key at any depth,
// strictjson) holding an object "result" and no "error" but null;
// answerFailed when the agent said the call did not succeed: a status of
// 300 or more, or HTTP 200 with a strict JSON object body whose "error" is
// a JSON-RPC error object (isErrorObject) and that has no "result";
// answerUnrecognized for any other answer: a 2xx other than 200 (accepted,
// created, no content), a body that is not a strict JSON object (a
// well-framed but cut answer, a key given twice), no "result", a result
// that is not an object, an "error" that is neither null nor an error
// object, a result and an error both. The call may have run then, so it
// must not run again on a retry.
func classifyAnswer(resp Response) (json.RawMessage, answerVerdict) {
	switch {
	case resp.Status >= 300:
		return nil, answerFailed
	case resp.Status != http.StatusOK:
		return nil, answerUnrecognized
	}
	var env map[string]json.RawMessage
	if strictjson.Check(resp.Body, strictjson.MaxDepth) != nil || json.Unmarshal(resp.Body, &env) != nil {
		return nil, answerUnrecognized
	}
	res, hasResult := env["result"]
	if e, ok := env["error"]; ok && !bytes.Equal(bytes.TrimSpace(e), []byte("null")) {
		if !hasResult && isErrorObject(e) {
			return nil, answerFailed
		}
		return nil, answerUnrecognized // a result beside it, or not an error object
	}
	if !hasResult {
		return nil, answerUnrecognized
	}
	out, err := rewriteResult(res)
	if err != nil {
		return nil, answerUnrecognized
	}
	return out, answerResult
}

// isErrorObject reports whether e, valid JSON, is a JSON-RPC error object
// as the rule of classifyAnswer reads it: a JSON object whose member
// "code", named exactly so, is an integer literal (a number without
// fraction or exponent: jsonrpc.IsIntegerLiteral).
func isErrorObject(e json.RawMessage) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal(e, &obj) != nil {
		return false
	}
	code := bytes.TrimSpace(obj["code"]) // valid JSON: the answer passed strictjson.Check
	isNumber := len(code) > 0 && (code[0] == '-' || '0' <= code[0] && code[0] <= '9')
	return isNumber && jsonrpc.IsIntegerLiteral(code)
}

// rewriteResult sets replay_safety.strictly_idempotent_response = true in the
// result object. It fails if result is not a JSON object.
func rewriteResult(result json.RawMessage) (json.RawMessage, error) {
	result = bytes.TrimSpace(result)
	if len(result) == 0 || result[0] != '{' {
		return nil, errors.New("result is not an object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(result, &m); err != nil {
		return nil, err
	}
	rs := map[string]json.RawMessage{}
	if raw, ok := m["replay_safety"]; ok {
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '{' {
			if err := json.Unmarshal(raw, &rs); err != nil {
				return nil, err
			}
		}
	}
	rs["strictly_idempotent_response"] = json.RawMessage("true")
	rsb, err := marshalNoEscape(rs)
	if err != nil {
		return nil, err
	}
	m["replay_safety"] = rsb
	return marshalNoEscape(m)
}

func marshalNoEscape(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

// compactID validates and compacts the raw JSON-RPC id; empty means null.
func compactID(id json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(id)) == 0 {
		return json.RawMessage("null"), nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, id); err != nil {
		return nil, fmt.Errorf("idempotency: request id is not valid JSON: %w", err)
	}
	return b.Bytes(), nil
}

func recordReply(id json.RawMessage, rec *Record) Reply {
	h := rec.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	return Reply{Status: rec.Status, Header: h, Body: jsonrpc.ResultResponse(id, rec.Result)}
}

// conflictResult is the result of a conflict reply.
var conflictResult = json.RawMessage(`{"status":"error","errors":[{"code":"` + CodeConflict +
	`","message":"idempotency_key was already used with a different input, mission_id or job_id"}],` +
	`"replay_safety":{"strictly_idempotent_response":true}}`)

func conflictReply(id json.RawMessage) Reply {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return Reply{Status: http.StatusOK, Header: h, Body: jsonrpc.ResultResponse(id, conflictResult), Conflict: true}
}

// replyHeader is the agent's header as recorded and replayed: without what
// no copy of an answer carries (hop.RemoveFromCopy: the hop-by-hop headers,
// those Connection names, Content-Length, Date and Set-Cookie).
func replyHeader(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	hop.RemoveFromCopy(out)
	return out
}
