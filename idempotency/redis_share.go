package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
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

// reserveSweep is the expired reservations one sweep of reserveScript
// drops; reserveRounds bounds the sweeps of one call (it sweeps again only
// while the group would be refused and a full batch was dropped).
const (
	reserveSweep  = 512
	reserveRounds = 64
)

// KEYS[1] exp (sorted set), KEYS[2] size (hash); ARGV[1] record id, ARGV[2]
// its bytes (-1: an entry alone, for a claim: the member is added with 0
// bytes if absent, else only its expiry is extended), ARGV[3] the group's
// bytes share, ARGV[4] reservation lifetime ms, ARGV[5] reserveSweep,
// ARGV[6] the group's entries share (0: not checked, as for a record),
// ARGV[7] reserveRounds.
// Returns {verdict, prev}: verdict 1 if reserved (or already reserved: a
// resent script counts once), 0 if the group would pass its bytes share, 2
// its entries share; prev is the member's bytes before the call, -1 if it
// was absent. Expired members are dropped before deciding (every one, in
// batches, while the group would be refused), so "over" counts live
// reservations only. Writes the new total before deleting anything, and
// the reservation's member before its size: a write Redis refuses half-way
// (OOM) leaves the count too high, never too low.
var reserveScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local batch = tonumber(ARGV[5])
local total = tonumber(redis.call('HGET', KEYS[2], 'total')) or 0
local function sweep()
  local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, batch)
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
  return #old
end
local size = tonumber(ARGV[2])
local eshare = tonumber(ARGV[6])
local prev = tonumber(redis.call('HGET', KEYS[2], ARGV[1]))
local function verdict()
  if size >= 0 and total - (prev or 0) + size > tonumber(ARGV[3]) then return 0 end
  if eshare > 0 and not prev and redis.call('ZCARD', KEYS[1]) >= eshare then return 2 end
  return 1
end
local n = sweep()
local v = verdict()
local rounds = 1
while v ~= 1 and n >= batch and rounds < tonumber(ARGV[7]) do
  n = sweep()
  rounds = rounds + 1
  v = verdict()
end
if v ~= 1 then return {v, prev or -1} end
local exp = now + tonumber(ARGV[4])
if size < 0 then
  local cur = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
  if not cur or cur < exp then redis.call('ZADD', KEYS[1], exp, ARGV[1]) end
  if not prev then redis.call('HSET', KEYS[2], ARGV[1], 0, 'total', total) end
else
  redis.call('ZADD', KEYS[1], exp, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], size, 'total', total - (prev or 0) + size)
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local at = math.max(exp, tonumber(last[2]))
redis.call('PEXPIREAT', KEYS[1], at)
redis.call('PEXPIREAT', KEYS[2], at)
return {1, prev or -1}
`)

// KEYS[1] exp, KEYS[2] size; ARGV[1] record id, ARGV[2] the bytes it had
// before the reservation being given back (-1: it had none, the member
// goes, and the two keys with the group's last member). Returns 1 if there
// was one, else 0. The total is lowered first: if Redis refuses that
// write, the reservation stays whole.
var unreserveScript = redis.NewScript(`
local size = tonumber(redis.call('HGET', KEYS[2], ARGV[1]))
if not size then return 0 end
local prev = tonumber(ARGV[2])
local keep = prev >= 0
if not keep then prev = 0 end
local total = (tonumber(redis.call('HGET', KEYS[2], 'total')) or 0) - size + prev
if total < 0 then total = 0 end
redis.call('HSET', KEYS[2], 'total', total)
if keep then
  redis.call('HSET', KEYS[2], ARGV[1], prev)
else
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
end
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

// reservation is one record's bytes, or one claim's entry, reserved in
// its group's share.
type reservation struct {
	s    *RedisStore
	keys []string // exp, size
	id   string
	done bool  // reserved
	prev int64 // the member's bytes before, -1 if it was absent
}

// newReservation is the reservation of id in the share of the group tag.
func (s *RedisStore) newReservation(tag, id string) *reservation {
	return &reservation{s: s, keys: []string{s.shareExpKey(tag), s.shareSizeKey(tag)}, id: id}
}

// reserve runs reserveScript on c for the record id of the group tag.
// Errors: ErrOverGroupShare (nothing reserved), or Redis's error.
func (r *reservation) reserve(ctx context.Context, c redis.Scripter, size int64, ttl time.Duration) error {
	v, err := r.run(ctx, c, size, ttl+r.s.reserveMargin, 0)
	if err == nil && v == 0 {
		return ErrOverGroupShare
	}
	return err
}

// reserveEntry reserves the entry of a claim (its in-flight mark, then
// its record) for lockTTL plus the margin: counted against the group's
// entries share unless already reserved. Errors: *ShareFullError (nothing
// reserved), or Redis's error.
func (r *reservation) reserveEntry(ctx context.Context, c redis.Scripter, lockTTL time.Duration) error {
	share := r.s.groupEntries.Load()
	if share <= 0 {
		return &ShareFullError{}
	}
	v, err := r.run(ctx, c, -1, lockTTL+r.s.reserveMargin, share)
	if err == nil && v == 2 {
		return &ShareFullError{Entries: int(share)}
	}
	return err
}

// run runs reserveScript and returns its verdict (1 reserved, 0 over the
// bytes share, 2 over the entries share).
func (r *reservation) run(ctx context.Context, c redis.Scripter, size int64, life time.Duration, entries int64) (int64, error) {
	res, err := reserveScript.Run(ctx, c, r.keys, r.id, size, r.s.groupShare.Load(), millis(life), reserveSweep,
		entries, reserveRounds).Int64Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("reserve script: unexpected reply %v", res)
	}
	if res[0] == 1 {
		r.done, r.prev = true, res[1]
	}
	return res[0], nil
}

// release gives the reservation back (best effort, detached from ctx's
// cancellation) when what it announced is known not to have been written:
// err is nil (the claim was lost, or the claim found a record or a mark)
// or Redis's own error reply. A member that existed before the
// reservation gets its former bytes back; one it added goes.
func (r *reservation) release(ctx context.Context, err error) {
	var rerr redis.Error
	if !r.done || (err != nil && !errors.As(err, &rerr)) {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.s.confirm)
	defer cancel()
	_ = unreserveScript.Run(rctx, r.s.client, r.keys, r.id, r.prev).Err()
}

// SetLimits applies the group shares of opts (MaxEntriesPerGroup and
// MaxBytesPerGroup, defaults MaxEntries/8 and MaxBytes/8 as for the memory
// store) to the running store; MaxEntries and MaxBytes bound nothing in
// Redis themselves (its maxmemory does). The gate calls it when a config
// reload keeps the store.
func (s *RedisStore) SetLimits(opts MemoryOptions) {
	l := opts.Resolved()
	s.groupShare.Store(l.MaxBytesPerGroup)
	s.groupEntries.Store(int64(l.MaxEntriesPerGroup))
}
