package references

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore keeps the bindings in Redis, shared by every sidecar using
// the same Redis and key prefix: one script (one round trip) per call that
// carries references. Keys: <prefix>{<agent>}:r:<hash> holds the owner
// workspace (expiring TTL after the last use); <prefix>{<agent>}:w:<ws>
// is the workspace's bindings by last use (its bound's order). Every key
// of one agent is in one Cluster hash slot (the {agent} tag), so the
// script runs on one node.
type RedisStore struct {
	client redis.UniversalClient
	prefix string
	mu     sync.Mutex
	lim    Limits
}

// NewRedisStore returns the store over client (built by the caller:
// caddymodule, through internal/redisclient, the one Redis client
// construction) with the key prefix.
func NewRedisStore(client redis.UniversalClient, prefix string, l Limits) *RedisStore {
	return &RedisStore{client: client, prefix: prefix, lim: l.Resolved()}
}

// SetLimits changes the bounds.
func (s *RedisStore) SetLimits(l Limits) {
	s.mu.Lock()
	s.lim = l.Resolved()
	s.mu.Unlock()
}

func (s *RedisStore) limits() Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lim
}

// Len is -1: Redis's bindings are not counted here.
func (s *RedisStore) Len() int { return -1 }

// Ping reports whether Redis answers.
func (s *RedisStore) Ping(ctx context.Context) error { return s.client.Ping(ctx).Err() }

// Close closes the client.
func (s *RedisStore) Close() error { return s.client.Close() }

// resolveScript: KEYS[1] the workspace's set, KEYS[2] the set of the
// conflicted references, KEYS[3..] the references; ARGV: workspace,
// conflicted (the owner value), now (µs: the sets' order), ttl (ms), max
// per workspace, mode (resolve with bind 1/0, or learn 2), then one create
// flag (1/0) per reference. Resolve returns {0, bound} allowed, {1, i}
// foreign, {2, i} unknown (i from 0); learn returns {3, bound, own,
// foreign}, a foreign reference made conflicted.
var resolveScript = redis.NewScript(`
local ws, conflicted, now, ttl, max, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local n = #KEYS - 2
local owner = {}
local foreign = 0
for i = 1, n do
  local v = redis.call('GET', KEYS[i+2])
  owner[i] = v
  if mode ~= '2' then
    if v and v ~= ws then return {1, i-1} end
    if (not v) and mode == '0' and ARGV[6+i] ~= '1' then return {2, i-1} end
  end
end
local function trim(set, who)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now - ttl * 1000)
  local over = redis.call('ZCARD', set) - max
  if over > 0 then
    local old = redis.call('ZRANGE', set, 0, over - 1)
    for _, k in ipairs(old) do
      if redis.call('GET', k) == who then redis.call('DEL', k) end
      redis.call('ZREM', set, k)
    end
  end
  redis.call('PEXPIRE', set, ttl)
end
local bound, own, conflicts = 0, 0, 0
for i = 1, n do
  local v = owner[i]
  if (not v) or v == ws then
    if v or redis.call('GET', KEYS[i+2]) == ws then own = own + 1 else bound = bound + 1 end
    redis.call('SET', KEYS[i+2], ws, 'PX', ttl)
    redis.call('ZADD', KEYS[1], now, KEYS[i+2])
  else
    foreign = foreign + 1
    if v ~= conflicted then
      redis.call('SET', KEYS[i+2], conflicted, 'PX', ttl)
      redis.call('ZADD', KEYS[2], now, KEYS[i+2])
      conflicts = conflicts + 1
    end
  end
end
trim(KEYS[1], ws)
if conflicts > 0 then trim(KEYS[2], conflicted) end
if mode == '2' then return {3, bound, own, foreign} end
return {0, bound}
`)

func (s *RedisStore) run(ctx context.Context, agent, workspace string, refs []Ref, mode string) ([]int64, error) {
	lim := s.limits()
	tag := s.prefix + "{" + agent + "}:"
	keys := make([]string, 0, len(refs)+2)
	keys = append(keys, tag+"w:"+workspace, tag+"c")
	args := make([]any, 0, 6+len(refs))
	args = append(args, workspace, Conflicted, time.Now().UnixMicro(), lim.TTL.Milliseconds(), lim.MaxPerWorkspace, mode)
	for _, r := range refs {
		k := keyOf(agent, r)
		keys = append(keys, tag+"r:"+hex.EncodeToString(k[:]))
		flag := "0"
		if r.Create {
			flag = "1"
		}
		args = append(args, flag)
	}
	v, err := resolveScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("references store redis: %w", err)
	}
	return v, nil
}

// Resolve implements Store.
func (s *RedisStore) Resolve(ctx context.Context, agent, workspace string, refs []Ref, bindUnknown bool) (Result, error) {
	mode := "0"
	if bindUnknown {
		mode = "1"
	}
	v, err := s.run(ctx, agent, workspace, refs, mode)
	if err != nil {
		return Result{}, err
	}
	if len(v) != 2 {
		return Result{}, fmt.Errorf("references store redis: unexpected answer of %d values", len(v))
	}
	switch v[0] {
	case 0:
		return Result{Outcome: Allowed, Bound: int(v[1])}, nil
	case 1:
		return Result{Outcome: Foreign, Index: int(v[1])}, nil
	case 2:
		return Result{Outcome: Unknown, Index: int(v[1])}, nil
	}
	return Result{}, fmt.Errorf("references store redis: unexpected answer %s", strconv.FormatInt(v[0], 10))
}

// Learn implements Store.
func (s *RedisStore) Learn(ctx context.Context, agent, workspace string, refs []Ref) (Learned, error) {
	v, err := s.run(ctx, agent, workspace, refs, "2")
	if err != nil {
		return Learned{}, err
	}
	if len(v) != 4 {
		return Learned{}, fmt.Errorf("references store redis: unexpected answer of %d values", len(v))
	}
	return Learned{Bound: int(v[1]), Own: int(v[2]), Foreign: int(v[3])}, nil
}
