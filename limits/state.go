package limits

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/supervaize/supervaizer-sidecar/internal/redisclient"
)

// Defaults of a State.
const (
	DefaultMaxKeys   = 100_000
	MaxMaxKeys       = 10_000_000
	DefaultKeyPrefix = "supervaizer:limit:"
	// storeRetryAfter is how long, after a failed Redis call, the shared
	// store is left alone: calls meanwhile follow on_store_error without
	// waiting for a Redis that just failed.
	storeRetryAfter = time.Second
)

// RedisOptions makes a State's rate buckets shared through Redis.
type RedisOptions struct {
	// Mode and URL as in redisclient.Options (single, sentinel,
	// cluster); passwords never appear in errors.
	Mode, URL string
	// KeyPrefix of every key (default DefaultKeyPrefix). A key is
	// "rate:" + KeyPrefix + "{<workspace hash>}:<rule hash>": the braces
	// are a cluster hash tag (one workspace's keys share a slot).
	KeyPrefix string
	// MinReplicasAck, if > 0, runs Redis WAIT after each bucket update on
	// the same connection; fewer acknowledgements within
	// ReplicaAckTimeout count as a store error.
	MinReplicasAck    int
	ReplicaAckTimeout time.Duration
}

// State is the limit state that outlives a configuration: local buckets
// (bounded LRU), calls in flight, and the shared store when Redis is
// configured. Keys of verified workspaces and the other keys (Key.Verified)
// live in two pools, each bounded by max_keys, so keys a client can make
// up never evict or crowd out a verified workspace's. It implements
// caddy.Destructor (Destruct) without importing Caddy. Safe for concurrent
// use.
type State struct {
	mu         sync.Mutex
	verified   pool
	unverified pool
	maxKeys    int

	redis      redis.UniversalClient // nil: memory only
	limiter    *redis_rate.Limiter
	prefix     string
	minAcks    int
	ackTimeout time.Duration
	health     StoreHealth // guarded by mu
}

// pool is one bounded set of keys: local rate buckets (LRU) and keys with
// calls in flight. Its fields are guarded by State.mu (the LRU has its own
// lock too).
type pool struct {
	buckets  *lru.Cache[string, *rate.Limiter]
	inflight map[string]int // concurrency key → calls in flight (absent at 0)
}

func newPool(maxKeys int) (pool, error) {
	b, err := lru.New[string, *rate.Limiter](maxKeys)
	return pool{buckets: b, inflight: map[string]int{}}, err
}

// pool is the pool of k's keys.
func (s *State) pool(k Key) *pool {
	if k.Verified() {
		return &s.verified
	}
	return &s.unverified
}

// StoreHealth is the shared store's recent record: Down from a failed call
// until the next good one.
type StoreHealth struct {
	Down      bool
	Since     time.Time // first failure of this outage
	LastError string    // no password (the client's error, URL redacted)
	retryAt   time.Time
}

// NewState builds a State; redisOpts nil keeps rate state in this process.
// It does not contact Redis. Errors: a bad Redis mode or URL, a negative
// bound.
func NewState(maxKeys int, redisOpts *RedisOptions) (*State, error) {
	if maxKeys < 0 || maxKeys > MaxMaxKeys {
		return nil, fmt.Errorf("limits: max_keys must be from 1 to %d", MaxMaxKeys)
	}
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	s := &State{maxKeys: maxKeys}
	var err error
	if s.verified, err = newPool(maxKeys); err != nil {
		return nil, err
	}
	if s.unverified, err = newPool(maxKeys); err != nil {
		return nil, err
	}
	if redisOpts == nil {
		return s, nil
	}
	if redisOpts.MinReplicasAck < 0 {
		return nil, errors.New("limits: min_replicas_ack must not be negative")
	}
	client, _, err := redisclient.New("limits", redisclient.Options{Mode: redisOpts.Mode, URL: redisOpts.URL})
	if err != nil {
		return nil, err
	}
	s.redis, s.limiter = client, redis_rate.NewLimiter(client)
	s.prefix = redisOpts.KeyPrefix
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	s.minAcks, s.ackTimeout = redisOpts.MinReplicasAck, redisOpts.ReplicaAckTimeout
	if s.ackTimeout <= 0 {
		s.ackTimeout = redisclient.DefaultReplicaAckTimeout
	}
	return s, nil
}

// Shared reports whether rate state goes through Redis.
func (s *State) Shared() bool { return s.redis != nil }

// SetMaxKeys rebounds each pool (a reload that changes max_keys keeps the
// buckets that still fit; the least recently used go first).
func (s *State) SetMaxKeys(n int) {
	if n <= 0 {
		n = DefaultMaxKeys
	}
	s.mu.Lock()
	s.maxKeys = n
	s.mu.Unlock()
	s.verified.buckets.Resize(n)
	s.unverified.buckets.Resize(n)
}

// Keys is the number of tracked keys of both pools: local buckets plus
// keys with calls in flight.
func (s *State) Keys() int {
	s.mu.Lock()
	n := len(s.verified.inflight) + len(s.unverified.inflight)
	s.mu.Unlock()
	return s.verified.buckets.Len() + s.unverified.buckets.Len() + n
}

// Health returns the shared store's record (zero without Redis).
func (s *State) Health() StoreHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

// Ping checks the shared store with one Redis PING (nil without Redis).
// Errors carry no password.
func (s *State) Ping(ctx context.Context) error {
	if s.redis == nil {
		return nil
	}
	return s.redis.Ping(ctx).Err()
}

// Destruct closes the Redis client (caddy.Destructor: the last
// configuration that used this State is gone).
func (s *State) Destruct() error {
	if s.redis != nil {
		return s.redis.Close()
	}
	return nil
}

// localAllow takes one token from the local bucket of (r, k), in k's
// pool, creating it full. It returns the wait before a token would be
// there (0: taken) and an undo that gives the token back.
func (s *State) localAllow(r *Rule, k Key, now time.Time) (time.Duration, func()) {
	key := r.text + "\x00" + k.id()
	p := s.pool(k)
	s.mu.Lock()
	b, ok := p.buckets.Get(key)
	if !ok {
		b = rate.NewLimiter(rate.Limit(float64(r.N)/r.Per.Seconds()), r.Burst)
		p.buckets.Add(key, b)
	}
	s.mu.Unlock()
	res := b.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, nil
	}
	return 0, func() { res.CancelAt(now) }
}

// sharedAllow takes one token from the Redis bucket of (r, id) (id is
// Key.id: the pools of a State are local only, Redis holds both). ok is
// false when the store was not asked (it failed less than storeRetryAfter
// ago) or failed; err is then the failure (nil when skipped). A call whose
// ctx ended meanwhile is refused (a 1 s wait) without blaming the store.
func (s *State) sharedAllow(ctx context.Context, r *Rule, id string, now time.Time) (wait time.Duration, ok bool, err error) {
	s.mu.Lock()
	skip := s.health.Down && now.Before(s.health.retryAt)
	s.mu.Unlock()
	if skip {
		return 0, false, nil
	}
	key := s.prefix + "{" + hash(id, 16) + "}:" + hash(r.text, 4)
	lim := redis_rate.Limit{Rate: r.N, Period: r.Per, Burst: r.Burst}
	res, err := s.redisAllow(ctx, key, lim)
	if err != nil && ctx.Err() != nil {
		// The caller went away: not the store's fault, and nothing to forward.
		return time.Second, true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if !s.health.Down {
			s.health.Down, s.health.Since = true, now
		}
		s.health.LastError, s.health.retryAt = err.Error(), now.Add(storeRetryAfter)
		return 0, false, err
	}
	s.health = StoreHealth{}
	if res.Allowed > 0 {
		return 0, true, nil
	}
	if res.RetryAfter <= 0 {
		res.RetryAfter = time.Second
	}
	return res.RetryAfter, true, nil
}

// redisAllow runs one GCRA step, then WAIT when min_replicas_ack is set.
func (s *State) redisAllow(ctx context.Context, key string, lim redis_rate.Limit) (*redis_rate.Result, error) {
	if s.minAcks <= 0 {
		return s.limiter.Allow(ctx, key, lim)
	}
	cn, err := redisclient.PrimaryConn(ctx, s.redis, "rate:"+key)
	if err != nil {
		return nil, err
	}
	defer cn.Close()
	res, err := redis_rate.NewLimiter(cn).Allow(ctx, key, lim)
	if err != nil {
		return nil, err
	}
	n, err := cn.Wait(ctx, s.minAcks, s.ackTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("WAIT %d: %w", s.minAcks, err)
	}
	if n < int64(s.minAcks) {
		return nil, fmt.Errorf("%d of %d replicas acknowledged within %s", n, s.minAcks, s.ackTimeout)
	}
	return res, nil
}

// acquire takes a concurrency slot of (r, k); false when r's N are in
// flight, or when max_keys keys of k's pool already have calls in flight
// (bounded state: refused rather than grown).
func (s *State) acquire(r *Rule, k Key) (release func(), ok bool) {
	key := r.text + "\x00" + k.id()
	p := s.pool(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	n, tracked := p.inflight[key]
	if n >= r.N || (!tracked && len(p.inflight) >= s.maxKeys) {
		return nil, false
	}
	p.inflight[key] = n + 1
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if p.inflight[key] <= 1 {
				delete(p.inflight, key)
			} else {
				p.inflight[key]--
			}
		})
	}, true
}

// hash is the first n bytes of SHA-256(s), hex: a fixed-size key part that
// carries no braces and no client text.
func hash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:n])
}

// Key is whom a limit counts: the agent and either a verified workspace or,
// for a call without one (bootstrap calls, local mode), the transport key.
type Key struct {
	Agent string
	// Workspace is the verified workspace id; "" for a call without one.
	// Never the request's own workspace field: a client holding only the
	// transport key could name a new workspace on each call.
	Workspace string
	// Transport is the transport key's fingerprint (never the key), the
	// key of a call without a verified workspace; ignored with Workspace.
	Transport string
}

// Verified reports whether k is a verified workspace's key (its own pool
// in a State: other keys never evict or crowd it out).
func (k Key) Verified() bool { return k.Workspace != "" }

func (k Key) id() string {
	if k.Verified() {
		return "w\x00" + k.Agent + "\x00" + k.Workspace
	}
	return "t\x00" + k.Agent + "\x00" + k.Transport
}

// take takes one token of r for k at now: from Redis when shared, else
// locally. When the shared store fails, storeErr (if set) is told, and
// the call is refused (onStoreError deny: the wait storeRetryAfter) or
// counted locally (fallback). It returns the wait of a refusal (0: taken)
// and an undo for a local token.
func (s *State) take(ctx context.Context, r *Rule, k Key, now time.Time, onStoreError string,
	storeErr func(err error, fallback string)) (wait time.Duration, undo func(), fallback bool) {
	if s.Shared() {
		wait, ok, err := s.sharedAllow(ctx, r, k.id(), now)
		if ok {
			return wait, nil, false
		}
		if err != nil && storeErr != nil {
			storeErr(err, onStoreError)
		}
		if onStoreError == OnStoreErrorDeny {
			return storeRetryAfter, nil, false
		}
		fallback = true
	}
	wait, undo = s.localAllow(r, k, now)
	return wait, undo, fallback
}
