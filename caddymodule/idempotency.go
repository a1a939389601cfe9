package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// IdempotencyConfig makes confirm actions safe to retry in the proxy
// (supervaizer-v2 seed, "Idempotency"; sdk-wire-behavior.md, "Idempotent confirm").
type IdempotencyConfig struct {
	// Store is "memory" (default), "redis" or "off".
	Store     string `json:"store,omitempty"`
	RedisURL  string `json:"redis_url,omitempty"`
	KeyPrefix string `json:"key_prefix,omitempty"`
	// TTL of a record (default 24 h); LockTTL of an in-flight mark (default
	// 2 min); WaitTimeout for a retry waiting on an in-flight call (default
	// 30 s); UpstreamTimeout of a covered call to the agent (default 60 s).
	TTL             caddy.Duration `json:"ttl,omitempty"`
	LockTTL         caddy.Duration `json:"lock_ttl,omitempty"`
	WaitTimeout     caddy.Duration `json:"wait_timeout,omitempty"`
	UpstreamTimeout caddy.Duration `json:"upstream_timeout,omitempty"`
	// Actions covered besides job.start and the contract's setup start action.
	Actions []string `json:"actions,omitempty"`
	// RequireKey refuses covered calls without idempotency_key (-32602).
	RequireKey bool `json:"require_idempotency_key,omitempty"`
	// MaxEntries and MaxBytes bound the memory store (defaults 10,000 and 64 MiB).
	MaxEntries int   `json:"max_entries,omitempty"`
	MaxBytes   int64 `json:"max_bytes,omitempty"`
	// MaxEntriesPerWorkspace bounds one workspace's share of the memory
	// store (default max_entries/2), so one tenant cannot fill it for all.
	MaxEntriesPerWorkspace int `json:"max_entries_per_workspace,omitempty"`
}

// provisionIdempotency builds the guard (memory store unless configured).
//
// Errors: an unknown store; a bad Redis URL; lock_ttl not above upstream_timeout.
func (h *Handler) provisionIdempotency(g *gate, log *zap.Logger) error {
	ic := h.Idempotency
	if ic == nil {
		ic = &IdempotencyConfig{}
	}
	var store idempotency.Store
	switch ic.Store {
	case "", "memory":
		store = idempotency.NewMemoryStore(idempotency.MemoryOptions{MaxEntries: ic.MaxEntries, MaxBytes: ic.MaxBytes,
			MaxEntriesPerGroup: ic.MaxEntriesPerWorkspace})
	case "redis":
		prefix := ic.KeyPrefix
		if prefix == "" {
			// Records of two servers sharing one Redis never mix.
			prefix = idempotency.DefaultRedisKeyPrefix + g.serverID + ":"
		}
		rs, err := idempotency.NewRedisStore(idempotency.RedisOptions{URL: ic.RedisURL, KeyPrefix: prefix})
		if err != nil {
			return fmt.Errorf("supervaizer_auth: idempotency redis_url: %w", err)
		}
		store = rs
	case "off":
		return nil
	default:
		return fmt.Errorf("supervaizer_auth: idempotency store must be memory, redis or off, not %q", ic.Store)
	}
	opts := idempotency.Options{
		TTL: time.Duration(ic.TTL), LockTTL: time.Duration(ic.LockTTL),
		WaitTimeout: time.Duration(ic.WaitTimeout), UpstreamTimeout: time.Duration(ic.UpstreamTimeout),
		Observer: g.metrics.idempotencyObserver(),
	}
	lock, up := opts.LockTTL, opts.UpstreamTimeout
	if lock == 0 {
		lock = idempotency.DefaultLockTTL
	}
	if up == 0 {
		up = idempotency.DefaultUpstreamTimeout
	}
	if lock <= up {
		return fmt.Errorf("supervaizer_auth: idempotency lock_ttl (%s) must be longer than upstream_timeout (%s), or a slow call could run twice", lock, up)
	}
	g.idem = idempotency.New(store, opts)
	g.idemActions = map[string]bool{"job.start": true}
	for _, a := range ic.Actions {
		g.idemActions[a] = true
	}
	g.requireIdemKey = ic.RequireKey
	return nil
}

// covered reports whether action's calls go through the idempotency guard.
func (g *gate) covered(action, setupStart string) bool {
	if g.idem == nil {
		return false
	}
	return g.idemActions[action] || (setupStart != "" && action == setupStart)
}

// serveIdempotent forwards a covered call through the guard: a replay or a
// conflict is answered without the agent; a first call runs to completion
// even if the client goes away, and its definitive answer is recorded.
func (g *gate) serveIdempotent(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	call *jsonrpc.Call, workspaceID string, body []byte, d decision, a *audit) error {
	fp, err := idempotency.FingerprintIdentities(call.MissionID, call.JobID, call.HasJobID, call.Input)
	if err != nil {
		return writeJSONRPC(w, jsonrpc.ErrorResponse(call.ID, &jsonrpc.Error{
			Code: jsonrpc.CodeInvalidParams, Message: "Invalid params: input cannot be fingerprinted"}))
	}
	req := idempotency.Request{
		Key: idempotency.Key{WorkspaceID: workspaceID, AgentSlug: call.AgentSlug,
			Action: call.Action, IdempotencyKey: call.IdempotencyKey},
		Fingerprint: fp, ID: call.ID,
	}
	reply, err := g.idem.Do(r.Context(), req, func(ctx context.Context) (idempotency.Response, error) {
		g.rememberForEvents(d, call) // only calls that reach the agent can have effects
		rec := &bufferedWriter{header: http.Header{}}
		fr := r.Clone(ctx)
		resetBody(fr, body)
		if err := g.pass(next, rec, fr); err != nil {
			var he caddyhttp.HandlerError
			if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &he) && he.StatusCode == http.StatusGatewayTimeout) {
				return idempotency.Response{}, fmt.Errorf("%w: %w", idempotency.ErrOutcomeUnknown, err)
			}
			return idempotency.Response{}, err
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		return idempotency.Response{Status: rec.status, Header: rec.header, Body: rec.body}, nil
	})
	if err != nil {
		var ie *idempotency.Error
		switch {
		case errors.As(err, &ie):
			a.idem = ie.Code
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

// bufferedWriter collects a whole response of the next handler.
type bufferedWriter struct {
	header http.Header
	status int
	body   []byte
}

func (b *bufferedWriter) Header() http.Header { return b.header }
func (b *bufferedWriter) WriteHeader(s int) {
	if b.status == 0 {
		b.status = s
	}
}
func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	b.body = append(b.body, p...)
	return len(p), nil
}

// agentUnavailable answers a failed call to the agent on /a2a with HTTP 502
// and a JSON-RPC error body (not an HTML page), keeping the request id.
func (g *gate) agentUnavailable(w http.ResponseWriter, id []byte, err error) error {
	g.log.Warn("agent call failed", zap.Error(err))
	body := jsonrpc.ErrorResponse(id, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
		Message: "Agent unavailable", Data: map[string]string{"code": "agent_unavailable"}})
	status := http.StatusBadGateway
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode == http.StatusGatewayTimeout {
		status = http.StatusGatewayTimeout
	}
	return writeBody(w, status, body)
}
