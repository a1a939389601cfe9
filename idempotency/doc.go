// Package idempotency makes covered agent actions safe to retry, in front of
// the agent, as the Supervaizer v2 contract asks for the setup confirm
// (seed supervaizer-v2, section "Idempotency"; also "Scheduled start", whose
// retries reuse one idempotency_key per occurrence):
//
//   - the operation key is V2ActionRequest.idempotency_key; it is scoped here
//     by the verified workspace_id and agent_slug and by the action (Key);
//   - the identities mission_id and job_id, and the input, form the request
//     Fingerprint;
//   - same key + same fingerprint: the original result, nothing forwarded
//     again; same key + different fingerprint: result status "error" with
//     errors[0].code = "idempotency_conflict";
//   - results carry replay_safety.strictly_idempotent_response = true.
//
// The HTTP gate calls Guard.Do after authorization for job.start, for the
// registration's setup start action and for configured actions; which actions
// are covered is the gate's decision. A request without idempotency_key is
// not covered: the gate forwards it without calling this package (and counts
// it). The package knows nothing of Caddy or HTTP handlers: it takes a Key, a
// Fingerprint, the raw JSON-RPC id and a forward function, and returns a Reply
// or a refusal (*refusal.Refusal: JSON-RPC -32031 with data.code idempotency_in_progress
// or idempotency_store_unavailable; both retryable).
//
// Concurrent calls with one Key are serialized by an in-flight mark in a Store
// (MemoryStore for one process, FileStore for one process across restarts,
// RedisStore for replicas sharing a Redis, single, Sentinel or Cluster): one
// caller forwards, the others wait and answer from its record. Only a
// definitive answer (HTTP 200 with a JSON-RPC result object) is recorded. The
// key is released for another forward only when the agent answered a failure
// or the request provably never left the sidecar (ErrNotSent); every other
// outcome (a reset, an aborted answer, a timeout, a panic, a failed record)
// keeps it in flight until Options.LockTTL, so nothing runs twice
// (docs/idempotency.md, "One rule for 'was it sent?'"). Records expire
// after Options.TTL, marks after Options.LockTTL (a crashed holder never
// blocks a key for ever), and a holder whose mark expired can no longer
// record (fencing by a random claim token). When the store fails, Do fails
// closed: nothing is forwarded without the guarantee.
package idempotency
