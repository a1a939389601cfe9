package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis store defaults.
const (
	DefaultRedisURL             = "redis://127.0.0.1:6379/0"
	DefaultRedisKeyPrefix       = "supervaizer:idem:"
	DefaultRedisDialTimeout     = 2 * time.Second
	DefaultRedisReadTimeout     = 2 * time.Second
	DefaultRedisRecheckInterval = time.Second
)

// RedisOptions configures a RedisStore. Zero values take the defaults.
type RedisOptions struct {
	// URL of the Redis server, redis:// or rediss:// (go-redis ParseURL syntax,
	// e.g. "redis://:password@127.0.0.1:6379/0"). Default DefaultRedisURL.
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
}

// RedisStore is a Store shared by every replica that uses the same Redis
// server and KeyPrefix.
//
// Layout, for id = Key.ID() and p = KeyPrefix (the braces are a cluster hash
// tag, so the keys of one id share a slot):
//
//	p{id}:lock   string, the holder's random token, PX lockTTL (the in-flight mark)
//	p{id}:rec    string, JSON of the Record, PX ttl
//	p{id}:done   pub/sub channel, one message when the mark ends
//
// Claim is one Lua script: return the record if any; else SET lock token NX
// PX lockTTL; else report in flight. Record and Release are Lua scripts that
// compare the lock's value with the caller's token (fencing) before writing
// the record / deleting the lock, then PUBLISH on the done channel. Wait
// subscribes to the done channel, waits for the subscription to be confirmed,
// re-reads the lock's PTTL (so a message sent before the subscription is not
// missed), then waits for a message, the mark's expiry or RecheckInterval,
// whichever is first.
//
// Every Redis failure is returned as an *Error with CodeStoreUnavailable
// (wrapping the go-redis error); a down Redis never blocks longer than the
// configured timeouts. Safe for concurrent use.
type RedisStore struct {
	client  *redis.Client
	prefix  string
	recheck time.Duration
	confirm time.Duration // bound on the subscription confirmation
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

// NewRedisStore parses opts.URL and returns a store. It does not contact
// Redis, so it succeeds while Redis is down; calls then fail closed with an
// *Error (CodeStoreUnavailable). The only error is an invalid URL.
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
	ro, err := redis.ParseURL(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("idempotency: redis URL: %w", err)
	}
	if opts.DialTimeout > 0 {
		ro.DialTimeout = opts.DialTimeout
	} else if ro.DialTimeout == 0 {
		ro.DialTimeout = DefaultRedisDialTimeout
	}
	if opts.ReadTimeout > 0 {
		ro.ReadTimeout = opts.ReadTimeout
	} else if ro.ReadTimeout == 0 {
		ro.ReadTimeout = DefaultRedisReadTimeout
	}
	if opts.WriteTimeout > 0 {
		ro.WriteTimeout = opts.WriteTimeout
	} else if ro.WriteTimeout == 0 {
		ro.WriteTimeout = ro.ReadTimeout
	}
	ro.ContextTimeoutEnabled = true // ctx deadlines bound each call
	ro.MaxRetries = 2               // scripts are safe to retry (see above)
	ro.DialerRetries = 1            // fail closed fast when Redis is down
	confirm := ro.DialTimeout + ro.ReadTimeout
	return &RedisStore{
		client:  redis.NewClient(ro),
		prefix:  opts.KeyPrefix,
		recheck: opts.RecheckInterval,
		confirm: confirm,
	}, nil
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

// Claim implements Store. Errors: ctx.Err(), *Error (CodeStoreUnavailable).
func (s *RedisStore) Claim(ctx context.Context, id string, lockTTL time.Duration) (ClaimResult, error) {
	token, err := newToken()
	if err != nil {
		return ClaimResult{}, err
	}
	res, err := claimScript.Run(ctx, s.client, []string{s.recKey(id), s.lockKey(id)}, token, millis(lockTTL)).Slice()
	if err != nil {
		return ClaimResult{}, s.unavailable(ctx, err)
	}
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

// Record implements Store. Errors: ErrClaimLost, ctx.Err(), *Error
// (CodeStoreUnavailable).
func (s *RedisStore) Record(ctx context.Context, id, token string, rec Record, ttl time.Duration) error {
	raw, err := json.Marshal(wireRecord{V: 1, Fingerprint: rec.Fingerprint, Status: rec.Status, Header: rec.Header, Result: rec.Result})
	if err != nil {
		return fmt.Errorf("idempotency: encode record: %w", err)
	}
	n, err := recordScript.Run(ctx, s.client, []string{s.recKey(id), s.lockKey(id)}, token, raw, millis(ttl), s.channel(id)).Int64()
	if err != nil {
		return s.unavailable(ctx, err)
	}
	if n != 1 {
		return ErrClaimLost
	}
	return nil
}

// Release implements Store. Errors: ErrClaimLost, ctx.Err(), *Error
// (CodeStoreUnavailable).
func (s *RedisStore) Release(ctx context.Context, id, token string) error {
	n, err := releaseScript.Run(ctx, s.client, []string{s.lockKey(id)}, token, s.channel(id)).Int64()
	if err != nil {
		return s.unavailable(ctx, err)
	}
	if n != 1 {
		return ErrClaimLost
	}
	return nil
}

// Wait implements Store (see RedisStore for the protocol). It uses one pub/sub
// connection for the duration of the call. Errors: ctx.Err(), *Error
// (CodeStoreUnavailable) if the subscription or the re-check fails or the
// pub/sub connection breaks while waiting.
func (s *RedisStore) Wait(ctx context.Context, id string) error {
	ps := s.client.Subscribe(ctx, s.channel(id))
	defer ps.Close()

	// Confirmation: once the server has registered the subscription, every
	// later PUBLISH reaches us.
	msg, err := ps.ReceiveTimeout(ctx, s.confirm)
	if err != nil {
		return s.unavailable(ctx, err)
	}
	if sub, ok := msg.(*redis.Subscription); !ok || sub.Kind != "subscribe" {
		return nil // a message already: look again
	}

	pttl, err := s.client.Do(ctx, "PTTL", s.lockKey(id)).Int64()
	if err != nil {
		return s.unavailable(ctx, err)
	}
	if pttl == -2 { // no mark: recorded, released or expired already
		return nil
	}
	d := s.recheck
	if pttl >= 0 {
		if e := time.Duration(pttl+1) * time.Millisecond; e < d {
			d = e
		}
	}

	got := make(chan error, 1)
	go func() {
		// Unblocked by ps.Close when Wait returns.
		_, err := ps.Receive(context.Background())
		got <- err
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-got:
		if err != nil {
			return s.unavailable(ctx, err)
		}
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ping implements Store: a Redis PING. Errors: ctx.Err(), *Error
// (CodeStoreUnavailable).
func (s *RedisStore) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return s.unavailable(ctx, err)
	}
	return nil
}

// Close closes the Redis client; later calls fail with an *Error wrapping
// ErrClosed.
func (s *RedisStore) Close() error {
	return s.client.Close()
}

// millis converts d to a positive millisecond count for PX.
func millis(d time.Duration) string {
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10)
}
