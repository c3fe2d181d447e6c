package redisstore

import "github.com/redis/go-redis/v9"

// The record of one ID is one Redis hash; its fields:
//
//	s       state: "1" in flight, "2" completed
//	f       fingerprint (32 bytes)
//	t       owner token (kept after completion, see completeScript)
//	o       how the holder got the key: "1" created, "2" took over
//	ls, ln  lease until, Unix seconds and nanoseconds
//	es, en  expires at
//	cs, cn  created at
//	ds, dn  completed at
//	r       the stored response (encodeResponse)
//	p       the SHA-256 of the scope (32 bytes), which the key's name
//	        cannot give back, for counts by scope (RecordStats)
//
// Times are kept as seconds and nanoseconds apart because Lua numbers are
// doubles, which cannot hold Unix nanoseconds exactly; compared as pairs
// they are exact. Every time is the Engine's: no script reads Redis's clock
// (TIME) to decide anything. Expiry is a relative TTL (PEXPIRE), see
// ttlMillis.

// luaBefore is the prelude of every script that compares times.
const luaBefore = `
local function before(as, an, bs, bn)
  as, an, bs, bn = tonumber(as), tonumber(an), tonumber(bs), tonumber(bn)
  return as < bs or (as == bs and an < bn)
end
`

// acquireScript is Store.Acquire. KEYS[1] the record; ARGV: fingerprint,
// token, now (s, ns), lease until (s, ns), expires at (s, ns), TTL in ms,
// the scope's SHA-256.
// It returns {outcome} for Created (1) and TookOver (2), whose record the
// caller knows already, and {0, fields...} (recordFields order) for
// Existing.
//
// A live in-flight record that already holds this very token is this
// acquisition run a second time: a client library that lost the reply
// (the connection dropped after Redis ran the script) sends it again. It
// answers what the first run did, rather than Existing, which would leave
// the caller answering 409 for a record it holds itself.
var acquireScript = redis.NewScript(luaBefore + `
local k = KEYS[1]
local m = redis.call('HMGET', k, 's', 'f', 't', 'ls', 'ln', 'es', 'en', 'o')
if m[1] then
  local lapsed = not before(ARGV[3], ARGV[4], m[4], m[5])
  if before(ARGV[3], ARGV[4], m[6], m[7]) or (m[1] == '1' and not lapsed) then
    if m[1] == '1' and m[3] == ARGV[2] then
      return {tonumber(m[8])}
    end
    if m[1] ~= '1' or not lapsed or m[2] ~= ARGV[1] then
      local x = redis.call('HMGET', k, 'cs', 'cn', 'ds', 'dn', 'r')
      return {0, m[1], m[2], m[3], m[4], m[5], m[6], m[7], x[1], x[2], x[3], x[4], x[5]}
    end
    redis.call('HSET', k, 't', ARGV[2], 'o', '2', 'ls', ARGV[5], 'ln', ARGV[6],
      'es', ARGV[7], 'en', ARGV[8], 'cs', ARGV[3], 'cn', ARGV[4])
    redis.call('PEXPIRE', k, ARGV[9])
    return {2}
  end
  redis.call('DEL', k)
end
redis.call('HSET', k, 's', '1', 'f', ARGV[1], 't', ARGV[2], 'o', '1', 'ls', ARGV[5], 'ln', ARGV[6],
  'es', ARGV[7], 'en', ARGV[8], 'cs', ARGV[3], 'cn', ARGV[4], 'p', ARGV[10])
redis.call('PEXPIRE', k, ARGV[9])
return {1}
`)

// recordFields are the fields Get reads, in the order decodeRecord takes
// them; acquireScript returns the same list after its outcome.
var recordFields = []string{"s", "f", "t", "ls", "ln", "es", "en", "cs", "cn", "ds", "dn", "r"}

// luaRenew defines renew(k, token, sec, nsec), the renewal of one lease:
// 1, or 0 when the token holds no in-flight record. The lease only ever
// moves later: a renewal that lands after a newer one (its caller gave up
// on it) leaves the newer lease in place.
//
// An in-flight record's key lives until the later of its expiry and its
// lease (a holder that keeps renewing keeps its record, however long it
// runs). When a renewal moves that end, the key's TTL moves by as much:
// the difference of two Engine times, never a reading of Redis's clock.
const luaRenew = `
local function renew(k, token, ls, ln)
  local m = redis.call('HMGET', k, 's', 't', 'ls', 'ln', 'es', 'en')
  if m[1] ~= '1' or m[2] ~= token then
    return 0
  end
  if not before(m[3], m[4], ls, ln) then
    return 1 -- a late renewal never moves the lease back
  end
  redis.call('HSET', k, 'ls', ls, 'ln', ln)
  local es, en = m[5], m[6]
  if before(es, en, m[3], m[4]) then
    es, en = m[3], m[4]
  end
  if before(es, en, ls, ln) then
    local left = redis.call('PTTL', k)
    if left > 0 then
      local ms = (tonumber(ls) - tonumber(es)) * 1000 + (tonumber(ln) - tonumber(en)) / 1000000
      redis.call('PEXPIRE', k, string.format('%d', left + math.ceil(ms)))
    end
  end
  return 1
end
`

// renewScript is Store.Renew, and one lease of RenewBatch on a Cluster.
// KEYS[1] the record; ARGV: token, lease until (s, ns).
var renewScript = redis.NewScript(luaBefore + luaRenew + `
return renew(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
`)

// renewBatchScript is RenewBatch on a single node: every lease in one
// script. KEYS the records; ARGV: lease until (s, ns), then the token of
// each record. It returns renew's answer for each.
var renewBatchScript = redis.NewScript(luaBefore + luaRenew + `
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = renew(k, ARGV[2 + i], ARGV[1], ARGV[2])
end
return out
`)

// completeScript is Store.Complete. KEYS[1] the record; ARGV: token,
// response, completed at (s, ns), expires at (s, ns), TTL in ms. It
// returns 1, or 0 when the token holds no in-flight record.
//
// A completed record that this token completed with this very response is
// the same completion run a second time (a client library resending it
// after a lost reply): it answers 1 and changes nothing. Any other
// completion of a completed record is fenced.
var completeScript = redis.NewScript(`
local k = KEYS[1]
local m = redis.call('HMGET', k, 's', 't')
if m[2] ~= ARGV[1] then
  return 0
end
if m[1] == '2' then
  if redis.call('HGET', k, 'r') == ARGV[2] then
    return 1
  end
  return 0
end
redis.call('HSET', k, 's', '2', 'r', ARGV[2], 'ds', ARGV[3], 'dn', ARGV[4], 'es', ARGV[5], 'en', ARGV[6])
redis.call('PEXPIRE', k, ARGV[7])
return 1
`)

// releaseScript is Store.Release. KEYS[1] the record; ARGV: token. It
// returns 1, or 0 when the token holds no in-flight record.
var releaseScript = redis.NewScript(`
local m = redis.call('HMGET', KEYS[1], 's', 't')
if m[1] ~= '1' or m[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
`)

// purgeScript deletes one record if it is expired at now (idem.Record.Expired).
// KEYS[1] the record; ARGV: now (s, ns). It returns 1 if it deleted it.
var purgeScript = redis.NewScript(luaBefore + `
local k = KEYS[1]
local m = redis.call('HMGET', k, 's', 'ls', 'ln', 'es', 'en')
if not m[1] or before(ARGV[1], ARGV[2], m[4], m[5]) then
  return 0
end
if m[1] == '1' and before(ARGV[1], ARGV[2], m[2], m[3]) then
  return 0
end
redis.call('DEL', k)
return 1
`)

// forgetScript is Store.Forget. KEYS[1] the record; ARGV: state, token, as
// read. It deletes the record only if it still has both, and returns 1 if
// it did.
var forgetScript = redis.NewScript(`
local m = redis.call('HMGET', KEYS[1], 's', 't')
if m[1] ~= ARGV[1] or m[2] ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
`)
