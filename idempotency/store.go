package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"
)

// Store keeps, per key id (Key.ID), either nothing, an in-flight mark (a claim
// with a random token and a lock TTL) or a Record (with a TTL). Guard is its
// only intended caller; an implementation must be safe for concurrent use, and
// across processes if it is shared (RedisStore).
//
// Fencing: Record and Release act only if the given token is the key's current
// live claim; otherwise they change nothing and return ErrClaimLost.
//
// Errors other than ErrClaimLost, ctx errors and the documented sentinels mean
// the store is unavailable; Guard fails closed on them.
type Store interface {
	// Claim looks at key id once, atomically:
	//   - a live record  -> ClaimResult{State: StateRecorded, Record: copy}
	//   - a live mark    -> ClaimResult{State: StateInFlight}
	//   - otherwise      -> a new mark valid for lockTTL, ClaimResult{State:
	//     StateClaimed, Token: its random token}.
	// An expired mark counts as absent (that is how a crashed holder's key is
	// freed).
	Claim(ctx context.Context, id string, lockTTL time.Duration) (ClaimResult, error)

	// Record stores rec for ttl and removes the mark in one step, if token is
	// the current live claim of id; it then wakes the waiters of id.
	// Returns ErrClaimLost if token is not (and then writes nothing).
	//
	// Any other error leaves the outcome uncertain: the record may or may not
	// have been written. In particular a replicated store (RedisStore with
	// RedisOptions.MinReplicasAck) returns an error wrapping ErrNotReplicated
	// when the record was written on the primary but not acknowledged by
	// enough replicas, so a failover may still lose it. The caller must then
	// keep the key in flight, not call Release: the mark ends at its lock TTL
	// (and, the claim having been acknowledged by the replicas, it survives a
	// failover), so a retry waits or is refused instead of being forwarded
	// again.
	Record(ctx context.Context, id, token string, rec Record, ttl time.Duration) error

	// Release removes the mark if token is the current live claim of id and
	// wakes the waiters; returns ErrClaimLost otherwise.
	Release(ctx context.Context, id, token string) error

	// Wait blocks while id carries a live in-flight mark. It returns nil as
	// soon as the mark may be gone (recorded, released or expired); it may
	// also return nil early (a bounded fallback re-check), so callers call
	// Claim again and loop. It returns ctx.Err() when ctx is done, and a store
	// error if the store fails while waiting. It does not poll busily.
	Wait(ctx context.Context, id string) error

	// Ping reports whether the store is usable (for readiness probes).
	Ping(ctx context.Context) error

	// Close releases the store's resources. Later calls return ErrClosed.
	Close() error
}

// ClaimState is the outcome of Store.Claim.
type ClaimState int

const (
	// StateClaimed: the caller now holds the key (ClaimResult.Token).
	StateClaimed ClaimState = iota + 1
	// StateRecorded: a record exists (ClaimResult.Record).
	StateRecorded
	// StateInFlight: another holder has a live mark on the key.
	StateInFlight
)

// String returns "claimed", "recorded", "in_flight" or "unknown".
func (s ClaimState) String() string {
	switch s {
	case StateClaimed:
		return "claimed"
	case StateRecorded:
		return "recorded"
	case StateInFlight:
		return "in_flight"
	}
	return "unknown"
}

// ClaimResult is what Store.Claim saw. Token is set only for StateClaimed,
// Record only for StateRecorded.
type ClaimResult struct {
	State  ClaimState
	Token  string
	Record *Record
}

// Record is the definitive answer kept for a key: the request Fingerprint it
// answered, the agent's HTTP status (always 200 today) and headers (filtered,
// see Guard.Do), and the JSON-RPC result object as rewritten by the Guard
// (replay_safety.strictly_idempotent_response = true). The JSON-RPC envelope
// and id are not stored: each reply is rebuilt with its own request id.
type Record struct {
	Fingerprint string
	Status      int
	Header      http.Header
	Result      json.RawMessage
}

// size is the approximate number of bytes rec occupies (for memory bounds).
func (r *Record) size() int64 {
	n := int64(len(r.Fingerprint) + len(r.Result) + 16)
	for k, vs := range r.Header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v))
		}
	}
	return n
}

func (r *Record) clone() *Record {
	c := &Record{
		Fingerprint: r.Fingerprint,
		Status:      r.Status,
		Header:      r.Header.Clone(),
		Result:      append(json.RawMessage(nil), r.Result...),
	}
	return c
}

// newToken returns 128 random bits as 32 hex characters.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
