package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/hop"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/limits"
)

// IdempotencyConfig makes confirm actions safe to retry in the proxy
// (docs/idempotency.md: the guarantee, the stores, what each survives).
type IdempotencyConfig struct {
	// Store is "memory" (default: one process, lost at restart), "file"
	// (an embedded database file at FilePath: survives restarts of one
	// process), "redis" (shared by replicas) or "off".
	Store string `json:"store,omitempty"`
	// FilePath is the file store's database file (store file <path>); its
	// directory is created if missing. One process per file.
	FilePath string `json:"file_path,omitempty"`
	// RedisURL is the Redis address in the syntax of RedisMode (default
	// redis://127.0.0.1:6379/0).
	RedisURL string `json:"redis_url,omitempty"`
	// RedisMode is "single" (default), "sentinel" (RedisURL in the failover
	// syntax, redis://host:26379?master_name=mymaster&addr=host2:26379) or
	// "cluster" (redis://host1:7000?addr=host2:7001).
	RedisMode string `json:"redis_mode,omitempty"`
	// MinReplicasAck is the number of Redis replicas that must acknowledge
	// a claim before the call is forwarded, and a record after it (Redis
	// WAIT); 0 (default) waits for none.
	MinReplicasAck int `json:"min_replicas_ack,omitempty"`
	// ReplicaAckTimeout bounds each such WAIT (default 500 ms); fewer
	// acknowledgements by then count as not replicated.
	ReplicaAckTimeout caddy.Duration `json:"replica_ack_timeout,omitempty"`
	// KeyPrefix of every Redis key (default supervaizer:idem:<server_id>:).
	KeyPrefix string `json:"key_prefix,omitempty"`
	// TTL of a record (default 24 h).
	TTL caddy.Duration `json:"ttl,omitempty"`
	// LockTTL of an in-flight mark (default 2 min): after a forward whose
	// outcome is unknown, retries get idempotency_in_progress this long.
	LockTTL caddy.Duration `json:"lock_ttl,omitempty"`
	// WaitTimeout bounds how long a retry waits on an in-flight call
	// (default 30 s).
	WaitTimeout caddy.Duration `json:"wait_timeout,omitempty"`
	// UpstreamTimeout bounds a covered call to the agent (default 60 s).
	UpstreamTimeout caddy.Duration `json:"upstream_timeout,omitempty"`
	// Actions covered besides job.start and the contract's setup start action.
	Actions []string `json:"actions,omitempty"`
	// RequireKey refuses covered calls without idempotency_key (-32602).
	RequireKey bool `json:"require_idempotency_key,omitempty"`
	// MaxEntries bounds the memory and file stores (default 10,000).
	MaxEntries int `json:"max_entries,omitempty"`
	// MaxBytes bounds the recorded bytes of the memory and file stores
	// (default 64 MiB). With the Redis store it bounds nothing itself
	// (Redis's maxmemory does) but sets the default and the ceiling of
	// MaxBytesPerWorkspace.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// MaxEntriesPerWorkspace bounds one workspace's share of the memory and
	// file stores (default max_entries/2, at most max_entries), so one
	// tenant cannot fill it.
	MaxEntriesPerWorkspace int `json:"max_entries_per_workspace,omitempty"`
	// MaxBytesPerWorkspace bounds the recorded bytes of one workspace in
	// the memory, file and Redis stores (default max_bytes/8, at most
	// max_bytes): an answer that would take its workspace past it is passed
	// to the caller once, not recorded, and its key stays in flight until
	// lock_ttl (as an answer over max_record_bytes), so one tenant cannot
	// fill max_bytes (or Redis's maxmemory) for the others.
	MaxBytesPerWorkspace int64 `json:"max_bytes_per_workspace,omitempty"`
	// MaxRecordBytes bounds one covered answer kept in memory to be
	// recorded (default 1 MiB): a larger answer is passed to the caller
	// once, not recorded, and its key stays in flight until lock_ttl.
	MaxRecordBytes int64 `json:"max_record_bytes,omitempty"`
}

// defaultMaxRecordBytes is the default bound of a recorded answer: 1 MiB.
const defaultMaxRecordBytes = 1 << 20

// provisionIdempotency builds the guard over the shared store of the
// configured identity (memory store unless configured).
//
// Errors: an unknown store; a bad Redis URL or mode; a file store that
// cannot be opened. The bounds and invariants are validate's (bounds.go).
func (h *Handler) provisionIdempotency(g *Gate, log *zap.Logger) error {
	ic := h.Idempotency
	if ic == nil {
		ic = &IdempotencyConfig{}
	}
	if ic.Store == "off" {
		return nil
	}
	opts := idempotency.Options{
		TTL: time.Duration(ic.TTL), LockTTL: time.Duration(ic.LockTTL),
		WaitTimeout: time.Duration(ic.WaitTimeout), UpstreamTimeout: time.Duration(ic.UpstreamTimeout),
		Observer: g.Metrics.IdempotencyObserver(log),
	}
	prefix := ic.KeyPrefix
	if prefix == "" {
		// Records of two servers sharing one Redis never mix.
		prefix = idempotency.DefaultRedisKeyPrefix + g.ServerID + ":"
	}
	identity, err := storeIdentity(ic, g.ServerID, prefix)
	if err != nil {
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	st, err := acquireStore(identity, func() (idempotency.Store, error) { return openStore(ic, prefix) })
	if err != nil {
		return fmt.Errorf("supervaizer_auth: idempotency store %s: %w", ic.Store, err)
	}
	applyLimits(st, ic)
	g.IdemStore = st
	g.Idem = idempotency.New(st, opts)
	g.MaxRecordBytes = ic.MaxRecordBytes
	if g.MaxRecordBytes == 0 {
		g.MaxRecordBytes = defaultMaxRecordBytes
	}
	g.IdemActions = map[string]bool{"job.start": true}
	for _, a := range ic.Actions {
		g.IdemActions[a] = true
	}
	g.RequireIdemKey = ic.RequireKey
	return nil
}

// openStore opens a new store of ic's kind (called once per identity).
func openStore(ic *IdempotencyConfig, prefix string) (idempotency.Store, error) {
	switch ic.Store {
	case "", "memory":
		return idempotency.NewMemoryStore(memoryLimits(ic)), nil
	case "file":
		l := memoryLimits(ic)
		return idempotency.NewFileStore(idempotency.FileOptions{Path: ic.FilePath, MaxEntries: l.MaxEntries,
			MaxEntriesPerGroup: l.MaxEntriesPerGroup, MaxBytes: l.MaxBytes, MaxBytesPerGroup: l.MaxBytesPerGroup})
	case "redis":
		return idempotency.NewRedisStore(idempotency.RedisOptions{URL: ic.RedisURL, KeyPrefix: prefix,
			Mode: ic.RedisMode, MinReplicasAck: ic.MinReplicasAck, ReplicaAckTimeout: time.Duration(ic.ReplicaAckTimeout),
			MaxBytesPerGroup: memoryLimits(ic).Resolved().MaxBytesPerGroup})
	}
	return nil, fmt.Errorf("store %q cannot be opened", ic.Store)
}

// covered reports whether action's calls go through the idempotency guard.
func (g *Gate) covered(action, setupStart string) bool {
	if g.Idem == nil {
		return false
	}
	return g.IdemActions[action] || (setupStart != "" && action == setupStart)
}

// serveIdempotent forwards a covered call through the guard: a replay or a
// conflict is answered without the agent; a first call runs to completion
// even if the client goes away, and its definitive answer is recorded.
// The limits (lc) are checked only when the guard is about to forward, so
// a replay is not counted and a wait holds no concurrency slot; a refusal
// releases the key (nothing was sent) and is answered -32029.
func (g *Gate) serveIdempotent(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	call *jsonrpc.Call, workspaceID string, body []byte, d decision, a *audit, lc limitCall) error {
	fp, err := idempotency.FingerprintIdentities(call.MissionID, call.JobID, call.HasJobID, call.Input)
	if err != nil {
		a.deny("input_not_fingerprintable")
		return writeJSONRPC(w, jsonrpc.ErrorResponse(call.ID, &jsonrpc.Error{
			Code: jsonrpc.CodeInvalidParams, Message: "Invalid params: input cannot be fingerprinted"}))
	}
	req := idempotency.Request{
		Key: idempotency.Key{WorkspaceID: workspaceID, AgentSlug: call.AgentSlug,
			Action: call.Action, IdempotencyKey: call.IdempotencyKey},
		Fingerprint: fp, ID: call.ID,
	}
	done := g.IdemStore.Begin()
	defer done()
	var rec *recordWriter
	var refused *limits.Decision
	reply, err := g.Idem.Do(r.Context(), req, func(ctx context.Context) (idempotency.Response, error) {
		ld, release := g.admitLimits(ctx, a, lc)
		if !ld.Allowed {
			refused = &ld
			return idempotency.Response{}, errLimited
		}
		defer release()
		g.rememberForEvents(d, call) // only calls that reach the agent can have effects
		rec = newRecordWriter(w, g.MaxRecordBytes)
		return g.forwardCovered(next, rec, r.Clone(ctx), body)
	})
	if rec != nil && rec.passed {
		a.idem = "too_large"
		if err != nil {
			// The answer was cut short after its head reached the client:
			// end the client's stream the way reverse_proxy does.
			panic(http.ErrAbortHandler)
		}
		return nil
	}
	if refused != nil && isLimited(err) {
		return answerRateLimited(w, call.ID, *refused)
	}
	if err != nil {
		var ie *idempotency.Error
		switch {
		case errors.As(err, &ie):
			a.idem = ie.Code
			a.deny(ie.Code) // nothing was forwarded: a refusal, counted as one
			return writeJSONRPC(w, jsonrpc.ErrorResponse(call.ID, &jsonrpc.Error{
				Code: idempotency.JSONRPCCode, Message: ie.Message, Data: map[string]string{"code": ie.Code}}))
		case r.Context().Err() != nil:
			return nil // the client went away; the call itself completed or failed on its own
		}
		return g.agentUnavailable(w, call.ID, err)
	}
	switch {
	case reply.Replayed:
		a.idem = "replay"
	case reply.Conflict:
		a.idem = idempotency.CodeConflict
	}
	for k, v := range reply.Header {
		w.Header()[k] = v
	}
	if reply.Replayed {
		w.Header().Set(idempotency.ReplayHeader, "true")
	}
	w.Header().Set("Content-Length", itoa(len(reply.Body)))
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, err = w.Write(reply.Body)
	return err
}

// forwardCovered sends a covered call to next and classifies the outcome
// for the guard: an error wraps idempotency.ErrNotSent only when the
// request provably never left the sidecar (a dial error before any byte of
// the body was read); an abort of the agent's answer (reverse_proxy panics
// with http.ErrAbortHandler) becomes an error whose outcome is unknown.
func (g *Gate) forwardCovered(next caddyhttp.Handler, rec *recordWriter, fr *http.Request, body []byte) (resp idempotency.Response, err error) {
	fb := resetBody(fr, body)
	// The answer must be readable to be recorded: the client's own
	// Accept-Encoding would let the agent compress it (the transport then
	// asks for gzip itself and decodes it).
	fr.Header.Del("Accept-Encoding")
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				panic(p)
			}
			err = fmt.Errorf("%w: the agent's answer was cut short", idempotency.ErrOutcomeUnknown)
		}
	}()
	if err := g.pass(next, rec, fr); err != nil {
		var de reverseproxy.DialError
		if errors.As(err, &de) && fb.untouched() {
			return idempotency.Response{}, fmt.Errorf("%w: %w", idempotency.ErrNotSent, err)
		}
		return idempotency.Response{}, fmt.Errorf("%w: %w", idempotency.ErrOutcomeUnknown, err)
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.passed {
		return idempotency.Response{Status: rec.status, Header: rec.header, PassedThrough: true}, nil
	}
	// Encoded anyway: the gate cannot tell a result from a failure, so the
	// answer goes back as it is and the key stays in flight.
	return idempotency.Response{Status: rec.status, Header: rec.header, Body: rec.body,
		Unreadable: !hop.IdentityEncoding(rec.header)}, nil
}

// recordWriter collects the next handler's answer to a covered call, up to
// limit bytes of body. An answer that grows past limit is passed through to
// client instead (the head, the part kept so far, then the rest as it
// comes) and marked passed: it is not recorded.
type recordWriter struct {
	header http.Header
	status int
	body   []byte
	limit  int64
	client http.ResponseWriter
	passed bool
}

func newRecordWriter(client http.ResponseWriter, limit int64) *recordWriter {
	return &recordWriter{header: http.Header{}, limit: limit, client: client}
}

func (b *recordWriter) Header() http.Header { return b.header }

// WriteHeader keeps the answer's status. An informational answer (1xx,
// e.g. an agent's 103 Early Hints relayed by the proxy) is not the answer:
// it is dropped, not taken for the status of the record.
func (b *recordWriter) WriteHeader(s int) {
	if b.status == 0 && s >= 200 {
		b.status = s
	}
}

// Write keeps p while the body stays within limit, else passes through.
func (b *recordWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	if b.passed {
		return b.client.Write(p)
	}
	if int64(len(b.body))+int64(len(p)) <= b.limit {
		if b.body == nil { // one allocation for a declared length
			if n, err := strconv.ParseInt(b.header.Get("Content-Length"), 10, 64); err == nil && n > 0 && n <= b.limit {
				b.body = make([]byte, 0, n)
			}
		}
		b.body = append(b.body, p...)
		return len(p), nil
	}
	if err := b.passThrough(); err != nil {
		return 0, err
	}
	return b.client.Write(p)
}

// passThrough sends the head and the body kept so far to the client, and
// every later Write straight after them (Write has set the status).
func (b *recordWriter) passThrough() error {
	b.passed = true
	dst := b.client.Header()
	for k, v := range b.header {
		dst[k] = v
	}
	b.client.WriteHeader(b.status)
	_, err := b.client.Write(b.body)
	b.body = nil
	return err
}

// Flush flushes a passed-through answer; a kept one has nothing to flush.
func (b *recordWriter) Flush() {
	if b.passed {
		_ = http.NewResponseController(b.client).Flush()
	}
}

// agentUnavailable answers a failed call to the agent on /a2a with HTTP 502
// and a JSON-RPC error body (not an HTML page), keeping the request id.
func (g *Gate) agentUnavailable(w http.ResponseWriter, id []byte, err error) error {
	g.Log.Warn("agent call failed", redactErr(err))
	body := jsonrpc.ErrorResponse(id, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
		Message: "Agent unavailable", Data: map[string]string{"code": "agent_unavailable"}})
	status := http.StatusBadGateway
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode == http.StatusGatewayTimeout {
		status = http.StatusGatewayTimeout
	}
	return writeBody(w, status, body)
}
