package idempotency

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// Error codes. CodeInProgress and CodeStoreUnavailable are the data.code
// of the refusals of Do (*refusal.Refusal, JSON-RPC code JSONRPCCode,
// -32031). CodeConflict is not an error of Do: it appears inside the
// JSON-RPC result of a conflict Reply (errors[0].code), as the v2 contract asks.
const (
	// CodeInProgress: another request with the same Key is being forwarded and
	// did not finish within Options.WaitTimeout. Retryable with the same key.
	CodeInProgress = "idempotency_in_progress"
	// CodeStoreUnavailable: the store could not be read or written, so the
	// guarantee cannot be given and nothing was forwarded (fail closed).
	// Retryable with the same key.
	CodeStoreUnavailable = "idempotency_store_unavailable"
	// CodeConflict: the key was already used with another input, mission_id or
	// job_id. Carried in the result of a conflict Reply, never in a refusal.
	CodeConflict = "idempotency_conflict"

	// JSONRPCCode is the JSON-RPC error code of the refusals of Do.
	JSONRPCCode = -32031

	// ReplayHeader is the response header the gate sets to "true" on a
	// Reply with Replayed set.
	ReplayHeader = "X-Supervaize-Idempotent-Replay"
)

// ErrNotSent marks a forward error after which the request provably never
// left the sidecar (the connection to the agent could not be made: a dial
// error). It is the only forward error after which Do releases the key, so
// a retry forwards again; every other error keeps the key in flight until
// LockTTL (see Guard.Do, and docs/idempotency.md for the rule).
var ErrNotSent = errors.New("idempotency: the request never reached the agent")

// ErrOutcomeUnknown marks a forward error after which the agent may still be
// executing the call (a timeout, a reset, a body cut short). Do treats every
// forward error not wrapping ErrNotSent this way; the sentinel only labels
// such errors for logs.
var ErrOutcomeUnknown = errors.New("idempotency: the agent's outcome is unknown")

// The two retryable refusals of Do are *refusal.Refusal values: Code is
// CodeInProgress or CodeStoreUnavailable, RPCCode JSONRPCCode (answered
// with HTTP 200, data {"code": Code}); Message is a short client-safe text
// (it never contains the store's address or the underlying cause); Cause,
// if any, is the underlying error for logs (errors.Unwrap); Reason tells
// refusals of one Code apart for the audit line and metrics, never on the
// wire: AuditShareFull, or "".

// refuse is the refusal of code with msg and cause.
func refuse(code, msg string, status int, cause error) *refusal.Refusal {
	return &refusal.Refusal{Status: status, RPCCode: JSONRPCCode, Code: code, Message: msg, Cause: cause}
}

func errInProgress(cause error) *refusal.Refusal {
	return refuse(CodeInProgress, "a request with the same idempotency_key is still in progress; retry with the same key",
		http.StatusConflict, cause)
}

// ReasonShareFull is the idempotency outcome of the audit line (its
// "idempotency" field) of a caller whose own workspace holds its whole
// entries share (ShareFullError): its neighbours are not refused.
const ReasonShareFull = "workspace_share_full"

// AuditShareFull is the refusal's Reason (the audit line's code and the
// decisions_total label) when the caller's workspace holds its whole
// share: not the store-down alert's code (docs/idempotency.md).
const AuditShareFull = "idempotency_workspace_share_full"

// errShareFull is the refusal of a caller whose workspace holds its whole
// share. Same code as a store that cannot be used (the client retries it
// the same way, with the same key), a message that says whose share is
// full and which setting sets it.
func errShareFull(e *ShareFullError) *refusal.Refusal {
	r := refuse(CodeStoreUnavailable, fmt.Sprintf("this workspace's share of the idempotency store is full "+
		"(max_entries_per_workspace: %d records and calls in flight); nothing was forwarded; "+
		"retry with the same key once its oldest records expire", e.Entries), http.StatusServiceUnavailable, e)
	r.Reason = AuditShareFull
	return r
}

// ShareFullError is returned by a store's ClaimGroup when the caller's
// group (workspace) holds MaxEntriesPerGroup live records and marks, after
// the expired ones were dropped: the group's own refusal, never another
// group's. It matches ErrStoreFull (errors.Is).
type ShareFullError struct {
	// Entries is the group's share (MaxEntriesPerGroup).
	Entries int
}

// Error names the share.
func (e *ShareFullError) Error() string {
	return fmt.Sprintf("idempotency: the workspace's share of the store is full (%d live records and in-flight marks)", e.Entries)
}

// Is makes a *ShareFullError match ErrStoreFull.
func (e *ShareFullError) Is(target error) bool { return target == ErrStoreFull }

func errStoreUnavailable(cause error) *refusal.Refusal {
	return refuse(CodeStoreUnavailable, "idempotency store unavailable; retry with the same key",
		http.StatusServiceUnavailable, cause)
}

// Store errors. Stores return them (possibly wrapped); Do turns every store
// error into a refusal with CodeStoreUnavailable, except ErrClaimLost after a
// forward, which is only reported to the Observer.
var (
	// ErrClaimLost is returned by Store.Record and Store.Release when the
	// token is not the current claim of the key (the in-flight mark expired
	// after its lock TTL and may have been taken by another holder). Nothing
	// is written.
	ErrClaimLost = errors.New("idempotency: claim lost (in-flight mark expired or taken by another holder)")
	// ErrStoreFull is returned by the memory and file stores' Claim when
	// MaxEntries or MaxBytes is reached by live records and in-flight
	// marks, which are never evicted.
	ErrStoreFull = errors.New("idempotency: store full (live records and in-flight marks are never evicted)")
	// ErrRecordTooLarge is returned by the memory and file stores' Record
	// when one record is larger than their MaxBytes.
	ErrRecordTooLarge = errors.New("idempotency: record larger than the store's byte bound")
	// ErrOverGroupShare is returned by the memory, file and Redis stores'
	// Record when the record would take its group (workspace) past
	// MaxBytesPerGroup; nothing is written and the mark is kept. It wraps ErrRecordTooLarge: the Guard treats both
	// alike (the answer is passed on unrecorded, the key stays in flight
	// until its lock TTL).
	ErrOverGroupShare = fmt.Errorf("%w: the workspace's share of the store is full", ErrRecordTooLarge)
	// ErrClosed is returned by a store's methods after Close.
	ErrClosed = errors.New("idempotency: store closed")
)
