package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervaize/supervaizer-sidecar/internal/redisclient"
)

// Redis store defaults.
const (
	DefaultRedisURL             = "redis://127.0.0.1:6379/0"
	DefaultRedisKeyPrefix       = "supervaizer:idem:"
	DefaultRedisDialTimeout     = redisclient.DefaultDialTimeout
	DefaultRedisReadTimeout     = redisclient.DefaultReadTimeout
	DefaultRedisRecheckInterval = time.Second
	DefaultReplicaAckTimeout    = redisclient.DefaultReplicaAckTimeout
)

// Redis modes (RedisOptions.Mode), the client package's
// (internal/redisclient).
const (
	RedisModeSingle   = redisclient.ModeSingle
	RedisModeSentinel = redisclient.ModeSentinel
	RedisModeCluster  = redisclient.ModeCluster
)

// ErrNotReplicated is wrapped by the errors of RedisStore.Claim and
// RedisStore.Record when RedisOptions.MinReplicasAck is set and fewer
// replicas than that acknowledged the write within ReplicaAckTimeout (Redis
// WAIT), or WAIT itself failed:
//
//   - from Claim, inside a refusal with CodeStoreUnavailable: the fresh
//     in-flight mark was released (best effort) and nothing may be forwarded;
//   - from Record, as is (not a refusal): the record and the mark's removal
//     were applied on the primary but may be lost if it fails over now. The
//     caller must then keep the key in flight (not release it) until its lock
//     TTL: the claim was acknowledged by the replicas, so after a failover the
//     promoted replica still holds the mark and retries wait or get
//     CodeInProgress instead of executing the call again.
var ErrNotReplicated = errors.New("idempotency: write not acknowledged by enough Redis replicas")

// RedisOptions configures a RedisStore. Zero values take the defaults.
type RedisOptions struct {
	// Mode is RedisModeSingle ("single", the default), RedisModeSentinel
	// ("sentinel") or RedisModeCluster ("cluster"); it decides the URL syntax.
	Mode string
	// URL, redis:// or rediss://, in the syntax of Mode:
	//   - single:   go-redis ParseURL, "redis://[:password@]127.0.0.1:6379/0";
	//   - sentinel: go-redis ParseFailoverURL, the sentinels' addresses
	//     "redis://[:sentinel-password@]s1:26379/0?master_name=mymaster&addr=s2:26379"
	//     (master_name required; the primary's password as password=...);
	//   - cluster:  go-redis ParseClusterURL, "redis://[:password@]n1:7000?addr=n2:7001"
	//     (no database number).
	// Default DefaultRedisURL (single). Passwords never appear in errors.
	URL string
	// KeyPrefix of every key and channel name. Default "supervaizer:idem:".
	KeyPrefix string
	// DialTimeout bounds one connection attempt (default 2 s).
	DialTimeout time.Duration
	// ReadTimeout bounds one reply (default 2 s); WriteTimeout one write
	// (default: ReadTimeout). Values set in the URL are overridden only when
	// these fields are set.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// RecheckInterval is the fallback re-check period of Wait: if a wake-up
	// message is lost (reconnect), a waiter looks at the key again after at
	// most this long, or at the mark's expiry if sooner. Default 1 s.
	RecheckInterval time.Duration
	// MinReplicasAck, if > 0, makes Claim (when it takes the key) and Record
	// run Redis "WAIT MinReplicasAck ReplicaAckTimeout" on the connection
	// that ran their script, and fail with ErrNotReplicated when fewer
	// replicas acknowledged it. Default 0: no WAIT (asynchronous replication:
	// a failover may lose a mark or a record). Redis WAIT makes a lost write
	// unlikely, not impossible (a replica that acknowledged can still fail
	// with the primary).
	MinReplicasAck int
	// ReplicaAckTimeout bounds each WAIT (default 500 ms).
	ReplicaAckTimeout time.Duration
	// MaxEntriesPerGroup bounds the live records plus in-flight marks of
	// one group (workspace, through ClaimGroup): a claim that would pass
	// it is refused (*ShareFullError, nothing written). Default
	// DefaultMemoryMaxEntries/DefaultGroupShare (1250), as the memory
	// store's default. See redis_share.go for the accounting.
	MaxEntriesPerGroup int
	// MaxBytesPerGroup bounds the bytes of one group's (workspace's,
	// through ClaimGroup) live records: the stored JSON plus the id. A
	// record that would take its group past it is not written (Record
	// fails with ErrOverGroupShare, the mark stays until its lock TTL), so
	// one workspace cannot fill Redis's maxmemory for the others. Default
	// DefaultMemoryMaxBytes/DefaultGroupShare (8 MiB), as the memory
	// store's default.
	MaxBytesPerGroup int64
}

// RedisStore is a Store shared by every replica that uses the same Redis
// (one server, a Sentinel-managed primary or a Cluster) and KeyPrefix.
//
// Layout, for id = Key.ID() and p = KeyPrefix (the braces are a cluster hash
// tag, so the keys of one id share a slot):
//
//	p{id}:lock   string, the holder's random token, PX lockTTL (the in-flight mark)
//	p{id}:rec    string, JSON of the Record, PX ttl
//	p{id}:done   pub/sub channel, one message when the mark ends
//	p{ws:tag}:exp, p{ws:tag}:size   the entries and bytes of one workspace's
//	             live marks and records (MaxEntriesPerGroup, MaxBytesPerGroup),
//	             in that workspace's own slot: redis_share.go
//
// Claim first reserves the id's entry in its workspace's share (a script in
// the workspace's slot: refused when the workspace holds MaxEntriesPerGroup
// live entries; a reservation the claim turns out not to need is given
// back), then runs one Lua script: return the record if any; else SET lock
// token NX PX lockTTL; else report in flight. Record and Release are Lua scripts that
// compare the lock's value with the caller's token (fencing) before writing
// the record / deleting the lock, then PUBLISH on the done channel. Record
// first reserves the record's bytes in its workspace's share (another
// script, another slot: redis_share.go says what the gap between the two
// costs).
//
// Replication (MinReplicasAck > 0): a script that took the key or wrote the
// record is followed by WAIT on the same connection (WAIT counts the writes
// of its own connection): a sticky connection from the pool ((*redis.Client).Conn),
// in cluster mode one to the master of the key's slot (ClusterClient.MasterForKey;
// a slot that moves meanwhile fails the call, the caller retries). A
// script's writes reach a replica as one unit (Redis replicates a script's
// effects in one MULTI/EXEC block), so a replica that acknowledged the claim
// holds, at any time, the mark or the record that replaced it.
//
// Wait: all waiters of one store share one subscription, a PSUBSCRIBE to
// "p{*}:done" on one connection read by one dispatcher goroutine (waitHub),
// so 300 waiters use one pub/sub connection, not 300. A waiter registers for
// its channel, waits until the subscription is confirmed (bounded by
// DialTimeout+ReadTimeout), re-reads the lock's PTTL (so a message sent before
// the registration is not missed), then waits for a message, the mark's
// expiry or RecheckInterval, whichever is first. If the subscription breaks,
// every waiter is woken and re-checks (a message may have been lost); a
// subscription that cannot be confirmed fails Wait with a store error. After
// a Sentinel failover whose old primary stays reachable, the subscription may
// stay on the old primary until its connection breaks; waiters then learn of
// the end of a mark by RecheckInterval. Close stops the dispatcher.
//
// Every Redis failure is returned as a refusal with CodeStoreUnavailable
// (wrapping the go-redis error), except Record's ErrNotReplicated (above); a
// down Redis never blocks longer than the configured timeouts. Safe for
// concurrent use.
type RedisStore struct {
	client     redis.UniversalClient // *redis.Client (single, sentinel) or *redis.ClusterClient
	prefix     string
	recheck    time.Duration
	confirm    time.Duration // bound on the subscription confirmation
	minAcks    int
	ackTimeout time.Duration
	hub        *waitHub

	groupShare    atomic.Int64  // MaxBytesPerGroup, changed by SetLimits
	groupEntries  atomic.Int64  // MaxEntriesPerGroup, changed by SetLimits
	reserveMargin time.Duration // how long a reservation outlives its record's TTL
}

var _ Store = (*RedisStore)(nil)

// KEYS[1] rec, KEYS[2] lock; ARGV[1] token, ARGV[2] lock TTL ms.
// Returns {1, record} | {2, ""} (claimed) | {3, pttl} (in flight).
// A retried call with the same token finds its own lock and reports claimed.
var claimScript = redis.NewScript(`
local rec = redis.call('GET', KEYS[1])
if rec then return {1, rec} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2, ''} end
if redis.call('GET', KEYS[2]) == ARGV[1] then return {2, ''} end
return {3, tostring(redis.call('PTTL', KEYS[2]))}
`)

// KEYS[1] rec, KEYS[2] lock; ARGV[1] token, ARGV[2] record, ARGV[3] TTL ms,
// ARGV[4] channel. Returns 1 if recorded, 0 if the token does not hold the lock.
// A retried call after a success (lock gone, same record stored) returns 1.
var recordScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[2])
if cur ~= ARGV[1] then
  if not cur and redis.call('GET', KEYS[1]) == ARGV[2] then return 1 end
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[4], 'recorded')
return 1
`)

// KEYS[1] lock; ARGV[1] token, ARGV[2] channel. Returns 1 if released, else 0.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
`)

// NewRedisStore parses opts.URL for opts.Mode and returns a store. It does not
// contact Redis, so it succeeds while Redis is down; calls then fail closed
// with a refusal (CodeStoreUnavailable). Errors: an unknown Mode, an invalid
// URL for the Mode (the message names both, with passwords redacted), a
// negative MinReplicasAck.
func NewRedisStore(opts RedisOptions) (*RedisStore, error) {
	if opts.URL == "" {
		opts.URL = DefaultRedisURL
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = DefaultRedisKeyPrefix
	}
	if opts.RecheckInterval <= 0 {
		opts.RecheckInterval = DefaultRedisRecheckInterval
	}
	if opts.MinReplicasAck < 0 {
		return nil, fmt.Errorf("idempotency: redis min replicas ack %d: must be 0 or more", opts.MinReplicasAck)
	}
	if opts.ReplicaAckTimeout <= 0 {
		opts.ReplicaAckTimeout = DefaultReplicaAckTimeout
	}
	client, cs, err := redisclient.New("idempotency", redisclient.Options{Mode: opts.Mode, URL: opts.URL,
		DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout})
	if err != nil {
		return nil, err
	}
	s := &RedisStore{
		client:     client,
		prefix:     opts.KeyPrefix,
		recheck:    opts.RecheckInterval,
		confirm:    cs.Dial + cs.Read,
		minAcks:    opts.MinReplicasAck,
		ackTimeout: opts.ReplicaAckTimeout,
	}
	s.hub = newWaitHub(client, globEscape(s.prefix)+"{*}:done", s.confirm)
	s.reserveMargin = storeOpTimeout
	s.SetLimits(MemoryOptions{MaxEntriesPerGroup: opts.MaxEntriesPerGroup, MaxBytesPerGroup: opts.MaxBytesPerGroup})
	return s, nil
}

func (s *RedisStore) recKey(id string) string  { return s.prefix + "{" + id + "}:rec" }
func (s *RedisStore) lockKey(id string) string { return s.prefix + "{" + id + "}:lock" }
func (s *RedisStore) channel(id string) string { return s.prefix + "{" + id + "}:done" }

// unavailable wraps a Redis failure; ctx errors pass through unchanged.
func (s *RedisStore) unavailable(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, redis.ErrClosed) {
		return errStoreUnavailable(ErrClosed)
	}
	return errStoreUnavailable(err)
}

// wireRecord is the JSON stored at p{id}:rec.
type wireRecord struct {
	V           int             `json:"v"`
	Fingerprint string          `json:"fp"`
	Status      int             `json:"status"`
	Header      http.Header     `json:"header,omitempty"`
	Result      json.RawMessage `json:"result"`
}

// Claim implements Store: ClaimGroup with the empty group.
func (s *RedisStore) Claim(ctx context.Context, id string, lockTTL time.Duration) (ClaimResult, error) {
	return s.ClaimGroup(ctx, id, "", lockTTL)
}

// ClaimGroup is Claim for a caller of group (the Guard passes the verified
// workspace): the id's entry is first reserved in the group's share
// (MaxEntriesPerGroup; a claim that finds a record or a live mark gives a
// reservation it added back), the token names the group (groupToken), and
// Record charges the record to that group's share (MaxBytesPerGroup). With
// MinReplicasAck > 0, a claim that took the key is followed by WAIT (see
// RedisStore); too few acknowledgements release the fresh mark (best
// effort) and return a refusal (CodeStoreUnavailable) wrapping
// ErrNotReplicated. Errors: ctx.Err(), *ShareFullError (the group holds
// its share; nothing written), a refusal (CodeStoreUnavailable).
func (s *RedisStore) ClaimGroup(ctx context.Context, id, group string, lockTTL time.Duration) (ClaimResult, error) {
	random, err := newToken()
	if err != nil {
		return ClaimResult{}, err
	}
	token := groupToken(random, group)
	claimed := func(c *redis.Cmd) bool {
		res, _ := c.Slice()
		return len(res) == 2 && res[0] == int64(2)
	}
	entry := s.newReservation(groupTag(group), id)
	reserve := func(c redis.Scripter) error { return entry.reserveEntry(ctx, c, lockTTL) }
	cmd, ack, err := s.runAcked(ctx, claimScript, claimed, reserve, []string{s.recKey(id), s.lockKey(id)}, token, millis(lockTTL))
	var full *ShareFullError
	if errors.As(err, &full) {
		return ClaimResult{}, full
	}
	if err != nil {
		entry.release(ctx, err)
		return ClaimResult{}, s.unavailable(ctx, err)
	}
	if !claimed(cmd) && entry.prev < 0 {
		entry.release(ctx, nil) // a record or another holder's mark: reserved by their claim
	}
	if err := ack.err(s, "claim"); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.confirm)
		_ = s.Release(rctx, id, token) // best effort: else the mark ends at lockTTL
		cancel()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ClaimResult{}, ctxErr
		}
		return ClaimResult{}, errStoreUnavailable(err)
	}
	res, _ := cmd.Slice()
	if len(res) != 2 {
		return ClaimResult{}, errStoreUnavailable(fmt.Errorf("claim script: unexpected reply %v", res))
	}
	state, _ := res[0].(int64)
	switch state {
	case 1:
		raw, _ := res[1].(string)
		var w wireRecord
		if err := json.Unmarshal([]byte(raw), &w); err != nil || w.V != 1 {
			return ClaimResult{}, errStoreUnavailable(fmt.Errorf("undecodable record at %s: %v", s.recKey(id), err))
		}
		return ClaimResult{State: StateRecorded, Record: &Record{
			Fingerprint: w.Fingerprint, Status: w.Status, Header: w.Header, Result: w.Result,
		}}, nil
	case 2:
		return ClaimResult{State: StateClaimed, Token: token}, nil
	case 3:
		return ClaimResult{State: StateInFlight}, nil
	}
	return ClaimResult{}, errStoreUnavailable(fmt.Errorf("claim script: unexpected reply %v", res))
}

// Record implements Store. It first reserves the record's bytes in its
// group's share (redis_share.go): a record that would take the group past
// MaxBytesPerGroup is not written (ErrOverGroupShare, the mark kept). With
// MinReplicasAck > 0 the record is followed by WAIT; too few
// acknowledgements return an error wrapping ErrNotReplicated (the record is
// on the primary; the caller keeps the key in flight, see
// ErrNotReplicated). Errors: ErrClaimLost, ErrOverGroupShare,
// ErrNotReplicated, ctx.Err(), a refusal (CodeStoreUnavailable).
func (s *RedisStore) Record(ctx context.Context, id, token string, rec Record, ttl time.Duration) error {
	raw, err := json.Marshal(wireRecord{V: 1, Fingerprint: rec.Fingerprint, Status: rec.Status, Header: rec.Header, Result: rec.Result})
	if err != nil {
		return fmt.Errorf("idempotency: encode record: %w", err)
	}
	res := s.newReservation(tagOfToken(token), id)
	reserve := func(c redis.Scripter) error { return res.reserve(ctx, c, int64(len(raw)+len(id)), ttl) }
	recorded := func(c *redis.Cmd) bool { n, _ := c.Int64(); return n == 1 }
	cmd, ack, err := s.runAcked(ctx, recordScript, recorded, reserve, []string{s.recKey(id), s.lockKey(id)}, token, raw, millis(ttl), s.channel(id))
	if errors.Is(err, ErrOverGroupShare) {
		return ErrOverGroupShare
	}
	if err != nil {
		res.release(ctx, err)
		return s.unavailable(ctx, err)
	}
	if n, _ := cmd.Int64(); n != 1 {
		res.release(ctx, nil)
		return ErrClaimLost
	}
	return ack.err(s, "record")
}

// acks is the outcome of the WAIT after a script: ran is false when no WAIT
// was needed (MinReplicasAck 0, or the script wrote nothing that matters).
type acks struct {
	ran  bool
	n    int64
	fail error // WAIT's own error
}

// err returns nil if enough replicas acknowledged, else an error wrapping
// ErrNotReplicated that says how many did (op: "claim" or "record").
func (a acks) err(s *RedisStore, op string) error {
	if !a.ran || (a.fail == nil && a.n >= int64(s.minAcks)) {
		return nil
	}
	if a.fail != nil {
		return fmt.Errorf("%w: %s: WAIT %d %s failed: %v", ErrNotReplicated, op, s.minAcks, s.ackTimeout, a.fail)
	}
	return fmt.Errorf("%w: %s: %d of %d replicas acknowledged within %s", ErrNotReplicated, op, a.n, s.minAcks, s.ackTimeout)
}

// runAcked runs script with keys (keys[0] decides the cluster slot) and args,
// after before (if set; its error is returned as is and nothing else runs).
// With MinReplicasAck > 0 it runs on one connection to the key's primary
// and, if wrote(cmd), runs WAIT MinReplicasAck ReplicaAckTimeout on that
// same connection; before runs on that connection too, except in Cluster
// mode (its keys may be in another slot). err is before's, the script's or
// the connection's failure.
func (s *RedisStore) runAcked(ctx context.Context, script *redis.Script, wrote func(*redis.Cmd) bool,
	before func(redis.Scripter) error, keys []string, args ...any) (*redis.Cmd, acks, error) {
	if s.minAcks <= 0 {
		if before != nil {
			if err := before(s.client); err != nil {
				return nil, acks{}, err
			}
		}
		cmd := script.Run(ctx, s.client, keys, args...)
		return cmd, acks{}, cmd.Err()
	}
	cn, err := redisclient.PrimaryConn(ctx, s.client, keys[0])
	if err != nil {
		return nil, acks{}, err
	}
	defer cn.Close()
	if before != nil {
		var on redis.Scripter = cn
		if _, cluster := s.client.(*redis.ClusterClient); cluster {
			on = s.client
		}
		if err := before(on); err != nil {
			return nil, acks{}, err
		}
	}
	cmd := script.Run(ctx, cn, keys, args...)
	if cmd.Err() != nil || !wrote(cmd) {
		return cmd, acks{}, cmd.Err()
	}
	n, err := cn.Wait(ctx, s.minAcks, s.ackTimeout).Result()
	return cmd, acks{ran: true, n: n, fail: err}, nil
}

// Release implements Store; the mark's entry is given back to its
// workspace's share. Errors: ErrClaimLost, ctx.Err(), a refusal
// (CodeStoreUnavailable).
func (s *RedisStore) Release(ctx context.Context, id, token string) error {
	n, err := releaseScript.Run(ctx, s.client, []string{s.lockKey(id)}, token, s.channel(id)).Int64()
	if err != nil {
		return s.unavailable(ctx, err)
	}
	if n != 1 {
		return ErrClaimLost
	}
	// The mark's entry leaves its workspace's share (best effort: else it
	// counts until its reservation expires, never too little).
	res := s.newReservation(tagOfToken(token), id)
	res.done, res.prev = true, -1
	res.release(ctx, nil)
	return nil
}

// Wait implements Store (see RedisStore for the protocol). It shares the
// store's one subscription; the only connection it takes, briefly, is a
// pooled one for the PTTL re-check. Errors: ctx.Err(), a refusal
// (CodeStoreUnavailable) if the subscription is not confirmed within
// DialTimeout+ReadTimeout, the re-check fails, or the store is closed.
func (s *RedisStore) Wait(ctx context.Context, id string) error {
	ch := s.channel(id)
	w, ready, err := s.hub.register(ch)
	if err != nil {
		return errStoreUnavailable(err)
	}
	defer s.hub.unregister(ch, w)
	// Once the subscription is confirmed, every later PUBLISH on ch reaches
	// w (or the session breaks, which wakes w).
	if err := s.hub.awaitReady(ctx, ready); err != nil {
		return err
	}
	pttl, err := s.client.PTTL(ctx, s.lockKey(id)).Result()
	if err != nil {
		return s.unavailable(ctx, err)
	}
	if pttl == -2 { // no mark: recorded, released or expired already
		return nil
	}
	d := s.recheck
	if pttl >= 0 {
		if e := pttl + time.Millisecond; e < d {
			d = e
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-w.wake:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.hub.ctx.Done():
		return errStoreUnavailable(ErrClosed)
	}
}

// Ping implements Store: a Redis PING. Errors: ctx.Err(), a refusal
// (CodeStoreUnavailable).
func (s *RedisStore) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return s.unavailable(ctx, err)
	}
	return nil
}

// Close stops the shared subscription's dispatcher (waiting for it to return)
// and closes the Redis client; later calls, and Waits in progress, fail with
// a refusal wrapping ErrClosed.
func (s *RedisStore) Close() error {
	s.hub.close()
	return s.client.Close()
}

// globEscape escapes the PSUBSCRIBE glob characters of a literal prefix.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// millis converts d to a positive millisecond count for PX.
func millis(d time.Duration) string {
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10)
}
