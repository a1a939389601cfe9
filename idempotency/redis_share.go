package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A workspace's share of a RedisStore (RedisOptions.MaxBytesPerGroup).
//
// The records of one group (workspace) live in as many cluster slots as
// they have ids, so their bytes are counted apart, in the group's own slot
// (p = KeyPrefix, tag = groupTag(group), 32 hex characters):
//
//	p{ws:tag}:exp    sorted set: record id -> expiry of its reservation (ms, Redis clock)
//	p{ws:tag}:size   hash: record id -> reserved bytes, and "total" -> their sum
//
// Record first reserves the record's bytes there (reserveScript: drop the
// expired reservations, then add this one if the group stays within its
// share, else refuse: ErrOverGroupShare, nothing written, the mark kept),
// then writes the record in its own slot as before (a second round trip).
// The two steps are not atomic; every gap errs toward counting too much:
//
//   - the record script answers that the token lost its claim, or Redis
//     answers it with an error (OOM, a script error: nothing was written):
//     the reservation is given back (unreserveScript, best effort);
//   - the outcome of the record write is unknown (a timeout, a broken
//     connection, ErrNotReplicated) or the process dies between the two
//     steps: the reservation stays and is counted until it expires, though
//     the record may not exist.
//
// A reservation expires reserveMargin after the record it announces (the
// record is written, with its TTL, at most that long after the
// reservation), so a live record is always counted. Both keys expire with
// their last reservation (PEXPIREAT), so an idle group leaves nothing
// behind; one script drops at most reserveSweep expired reservations (the
// rest on later calls: until then they still count, never too little).
//
// Replication: with MinReplicasAck, in single and Sentinel mode the
// reservation runs on the record's connection, so the WAIT after the record
// covers it too; in Cluster mode it lives on the primary of the group's
// slot and is replicated asynchronously: a failover may lose the latest
// reservations, and the group then counts too little until those records
// expire. That loosens the share, never the at-most-once rule (which rests
// on the mark and the record).

// reserveSweep bounds the expired reservations one reserveScript drops.
const reserveSweep = 512

// KEYS[1] exp (sorted set), KEYS[2] size (hash); ARGV[1] record id, ARGV[2]
// its bytes, ARGV[3] the group's share, ARGV[4] reservation lifetime ms,
// ARGV[5] reserveSweep.
// Returns 1 if reserved (or already reserved: a resent script counts once),
// 0 if the group would pass its share. Writes the new total before deleting
// anything, and the reservation's member before its size: a write Redis
// refuses half-way (OOM) leaves the count too high, never too low.
var reserveScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
local total = tonumber(redis.call('HGET', KEYS[2], 'total')) or 0
local freed = {}
for _, m in ipairs(old) do
  if m ~= ARGV[1] then
    total = total - (tonumber(redis.call('HGET', KEYS[2], m)) or 0)
    freed[#freed + 1] = m
  end
end
if total < 0 or redis.call('ZCARD', KEYS[1]) == #freed then total = 0 end
if #freed > 0 then
  redis.call('HSET', KEYS[2], 'total', total)
  redis.call('ZREM', KEYS[1], unpack(freed))
  redis.call('HDEL', KEYS[2], unpack(freed))
end
local size = tonumber(ARGV[2])
local prev = tonumber(redis.call('HGET', KEYS[2], ARGV[1])) or 0
if total - prev + size > tonumber(ARGV[3]) then return 0 end
local exp = now + tonumber(ARGV[4])
redis.call('ZADD', KEYS[1], exp, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], size, 'total', total - prev + size)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local at = math.max(exp, tonumber(last[2]))
redis.call('PEXPIREAT', KEYS[1], at)
redis.call('PEXPIREAT', KEYS[2], at)
return 1
`)

// KEYS[1] exp, KEYS[2] size; ARGV[1] record id. Gives its reservation back.
// Returns 1 if there was one, else 0. The total is lowered first: if Redis
// refuses that write, the reservation stays whole.
var unreserveScript = redis.NewScript(`
local size = tonumber(redis.call('HGET', KEYS[2], ARGV[1]))
if not size then return 0 end
local total = (tonumber(redis.call('HGET', KEYS[2], 'total')) or 0) - size
if total < 0 then total = 0 end
redis.call('HSET', KEYS[2], 'total', total)
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
`)

// groupTag names a group in key names and tokens: the first 16 bytes of the
// SHA-256 of a version tag and the group, length-prefixed, in hex (no
// client text reaches a key name).
func groupTag(group string) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range [...]string{"supervaizer-idem-group-v1", group} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// groupToken is a claim token carrying its group: "<random>.<groupTag>".
// The lock holds the whole token, so fencing is unchanged.
func groupToken(random, group string) string { return random + "." + groupTag(group) }

// tagOfToken returns the group tag a token of groupToken carries, or the
// empty group's tag for any other token.
func tagOfToken(token string) string {
	if _, tag, ok := strings.Cut(token, "."); ok && len(tag) == 32 {
		if _, err := hex.DecodeString(tag); err == nil {
			return tag
		}
	}
	return groupTag("")
}

func (s *RedisStore) shareExpKey(tag string) string  { return s.prefix + "{ws:" + tag + "}:exp" }
func (s *RedisStore) shareSizeKey(tag string) string { return s.prefix + "{ws:" + tag + "}:size" }

// reservation is one record's bytes reserved in its group's share.
type reservation struct {
	s    *RedisStore
	keys []string // exp, size
	id   string
	done bool // reserved
}

// reserve runs reserveScript on c for the record id of the group tag.
// Errors: ErrOverGroupShare (nothing reserved), or Redis's error.
func (r *reservation) reserve(ctx context.Context, c redis.Scripter, size int64, ttl time.Duration) error {
	life := ttl + r.s.reserveMargin
	n, err := reserveScript.Run(ctx, c, r.keys, r.id, size, r.s.groupShare.Load(), millis(life), reserveSweep).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrOverGroupShare
	}
	r.done = true
	return nil
}

// release gives the reservation back (best effort, detached from ctx's
// cancellation) when the record is known not to have been written: err is
// nil (the claim was lost) or Redis's own error reply.
func (r *reservation) release(ctx context.Context, err error) {
	var rerr redis.Error
	if !r.done || (err != nil && !errors.As(err, &rerr)) {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.s.confirm)
	defer cancel()
	_ = unreserveScript.Run(rctx, r.s.client, r.keys, r.id).Err()
}

// SetLimits applies the group share of opts (MaxBytesPerGroup, default
// MaxBytes/8 as for the memory store) to the running store; the other
// bounds do not apply to Redis. The gate calls it when a config reload
// keeps the store.
func (s *RedisStore) SetLimits(opts MemoryOptions) {
	s.groupShare.Store(opts.Resolved().MaxBytesPerGroup)
}
