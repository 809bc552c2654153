package main

// The Lua scripts, one per operation, rule for rule those of leasecheck's
// reference targets/redis_lease.py. Redis runs a script atomically, so a script
// is this backend's transaction. KEYS are always the node's state hash, its
// epoch counter, the protected resource's fence and its effect log.

// prelude is what every script starts with: the server's clock, the fence,
// the refusal reasons and the node's record.
const prelude = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function raise_fence(epoch)
  local fence = tonumber(redis.call('GET', KEYS[3]))
  if fence == nil or epoch > fence then redis.call('SET', KEYS[3], epoch) end
end

-- why an operation was refused; epoch is nil for a claim
local function refusal(status, current, epoch)
  if not status then return {'error', 'no such node (no key ' .. KEYS[1] .. ')'} end
  if epoch == nil then
    if status == 'SUCCEEDED' then return {'terminal'} end
    return {'held'}
  end
  if current ~= epoch then
    if current > epoch then return {'stale', 'epoch ' .. epoch .. ' < current ' .. current} end
    return {'error', 'unknown epoch ' .. epoch}
  end
  if status == 'SUCCEEDED' then return {'terminal'} end
  if status ~= 'RUNNING' then return {'not-owner', 'the lease was released'} end
  return {'expired'}
end

local row = redis.call('HMGET', KEYS[1], 'status', 'epoch', 'expires_ms')
local status, current, expires = row[1], tonumber(row[2]), tonumber(row[3])
local now = now_ms()
`

// held is the Lua condition "the current, unexpired holder of this epoch".
const held = `(status == 'RUNNING' and current == epoch and expires > now)`

var scriptBodies = map[string]string{
	"add_node": `
if not status then redis.call('HSET', KEYS[1], 'status', 'READY', 'epoch', 0, 'attempt', 0) end
return {'ok'}
`,
	// ARGV: owner, ttl_ms. Only a free node or an expired lease may be taken.
	"claim": `
if not status or not (status == 'READY' or (status == 'RUNNING' and expires <= now)) then
  return refusal(status, current, nil)
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'epoch', epoch, 'owner', ARGV[1], 'expires_ms', now + tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HDEL', KEYS[1], 'result')
raise_fence(epoch)
return {'ok', epoch}
`,
	// ARGV: epoch, ttl_ms
	"renew": `
local epoch = tonumber(ARGV[1])
if not status or not ` + held + ` then return refusal(status, current, epoch) end
redis.call('HSET', KEYS[1], 'expires_ms', now + tonumber(ARGV[2]))
return {'ok'}
`,
	// ARGV: epoch, result
	"commit": `
local epoch = tonumber(ARGV[1])
if not status or not ` + held + ` then return refusal(status, current, epoch) end
redis.call('HSET', KEYS[1], 'status', 'SUCCEEDED', 'result', ARGV[2])
redis.call('HDEL', KEYS[1], 'expires_ms')
return {'ok'}
`,
	// ARGV: epoch; the holder may give back even an expired lease
	"release": `
local epoch = tonumber(ARGV[1])
if not (status == 'RUNNING' and current == epoch) then return refusal(status, current, epoch) end
redis.call('HSET', KEYS[1], 'status', 'READY')
redis.call('HDEL', KEYS[1], 'owner', 'expires_ms')
return {'ok'}
`,
	// ARGV: epoch, payload; the protected resource accepts only at or above its fence
	"effect": `
local epoch = tonumber(ARGV[1])
local fence = tonumber(redis.call('GET', KEYS[3])) or 0
if not (epoch >= fence) then return {'stale', 'epoch ' .. epoch .. ' < fence ' .. fence} end
raise_fence(epoch)
redis.call('RPUSH', KEYS[4], cjson.encode({epoch = epoch, payload = ARGV[2]}))
return {'ok'}
`,
	"read": `
return redis.call('HMGET', KEYS[1], 'status', 'epoch', 'owner', 'result')
`,
	// the protected resource, fence and effect log in one script (one snapshot);
	// no fence yet is 0: nothing is refused
	"read_resource": `
return {tonumber(redis.call('GET', KEYS[3])) or 0, redis.call('LRANGE', KEYS[4], 0, -1)}
`,
}
