package idempotency

import (
	"errors"
	"fmt"
)

// Error codes. CodeInProgress and CodeStoreUnavailable are carried by *Error and
// are meant for a JSON-RPC error with code JSONRPCCode (-32031) and data.code set
// to the Code. CodeConflict is not an error of Do: it appears inside the
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
	// job_id. Carried in the result of a conflict Reply, never in an *Error.
	CodeConflict = "idempotency_conflict"

	// JSONRPCCode is the JSON-RPC error code the gate uses for *Error.
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

// Error is the typed error of Do for the two retryable refusals. Code is
// CodeInProgress or CodeStoreUnavailable; Message is a short client-safe text
// (it never contains the store's address or the underlying cause). The cause,
// if any, is available through errors.Unwrap for logs.
type Error struct {
	Code    string
	Message string
	// Reason tells refusals of one Code apart for logs and metrics, never
	// on the wire: ReasonShareFull, or "".
	Reason string

	cause error
}

// Error returns "<code>: <message>" followed by the cause when there is one.
func (e *Error) Error() string {
	s := e.Code + ": " + e.Message
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}

// Unwrap returns the underlying cause (a store or context error), or nil.
func (e *Error) Unwrap() error { return e.cause }

func errInProgress(cause error) *Error {
	return &Error{
		Code:    CodeInProgress,
		Message: "a request with the same idempotency_key is still in progress; retry with the same key",
		cause:   cause,
	}
}

// ReasonShareFull is Error.Reason when the caller's own workspace holds
// its whole entries share (ShareFullError): its neighbours are not
// refused.
const ReasonShareFull = "workspace_share_full"

// errShareFull is the refusal of a caller whose workspace holds its whole
// share. Same code as a store that cannot be used (the client retries it
// the same way, with the same key), a message that says whose share is
// full and which setting sets it.
func errShareFull(e *ShareFullError) *Error {
	return &Error{
		Code: CodeStoreUnavailable,
		Message: fmt.Sprintf("this workspace's share of the idempotency store is full "+
			"(max_entries_per_workspace: %d records and calls in flight); nothing was forwarded; "+
			"retry with the same key once its oldest records expire", e.Entries),
		Reason: ReasonShareFull,
		cause:  e,
	}
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

func errStoreUnavailable(cause error) *Error {
	return &Error{
		Code:    CodeStoreUnavailable,
		Message: "idempotency store unavailable; retry with the same key",
		cause:   cause,
	}
}

// Store errors. Stores return them (possibly wrapped); Do turns every store
// error into an *Error with CodeStoreUnavailable, except ErrClaimLost after a
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
