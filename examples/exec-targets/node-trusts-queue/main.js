#!/usr/bin/env node
// node-trusts-queue: a deliberately BROKEN lease on Redis, in plain Node.js,
// that leasecheck tests as a language-neutral target (--target exec:COMMAND).
//
// The bug is a design, not a typo: "the queue is the authority". A worker that
// got a message from the at-least-once queue believes the node is its own. So
// a claim always succeeds (a new epoch from INCR, no look at a live lease; only
// a node already SUCCEEDED is refused), and renew, effect, commit and release
// carry the epoch without anyone checking it. Under duplicate delivery two
// workers hold the node at once and both write and commit. See README.md for
// the anomalies leasecheck finds.
//
// Protocol: JSON Lines on stdin/stdout, a hello line, then one answer per
// request, one request at a time (docs/contracts/exec-protocol.md).
// The store is reached with the small RESP client below over `net`: no npm
// packages. Errors: Redis not reachable before sending -> "unavailable";
// a timeout or a lost connection after sending -> "indeterminate".

'use strict';

const net = require('node:net');
const readline = require('node:readline');

const NAME = 'node-trusts-queue';
const BUG = 'the queue is the authority: claims never look at a live lease, nothing is fenced';
// what leasecheck finds under duplicate delivery (README.md); every run so far gave all six
const EXPECTED = ['overlapping-lease', 'duplicate-commit', 'stale-commit', 'stale-effect', 'stale-renew', 'lost-commit', 'non-linearizable'];
const TIMEOUT_MS = 2000; // one connect or command; below leasecheck's default op deadline (5 s)
const PREFIX = 'lc';

class Unavailable extends Error {}
class Indeterminate extends Error {}
class ReplyError extends Error {}

// ------------------------------------------------------------------ RESP

function encode(args) {
  const parts = [`*${args.length}\r\n`];
  for (const arg of args) {
    const s = String(arg);
    parts.push(`$${Buffer.byteLength(s)}\r\n${s}\r\n`);
  }
  return parts.join('');
}

// One reply from buf at pos: [value, next pos], or null when incomplete.
function parse(buf, pos) {
  const eol = buf.indexOf('\r\n', pos);
  if (eol < 0) return null;
  const line = buf.toString('utf8', pos + 1, eol);
  const next = eol + 2;
  switch (String.fromCharCode(buf[pos])) {
    case '+': return [line, next];
    case '-': return [new ReplyError(line), next];
    case ':': return [Number(line), next];
    case '$': {
      const len = Number(line);
      if (len < 0) return [null, next];
      if (buf.length < next + len + 2) return null;
      return [buf.toString('utf8', next, next + len), next + len + 2];
    }
    case '*': {
      const len = Number(line);
      if (len < 0) return [null, next];
      const items = [];
      let at = next;
      for (let i = 0; i < len; i++) {
        const item = parse(buf, at);
        if (item === null) return null;
        items.push(item[0]);
        at = item[1];
      }
      return [items, at];
    }
    default: throw new Error(`bad RESP reply: ${JSON.stringify(line)}`);
  }
}

// A connection to one Redis, used for one command at a time.
class Redis {
  constructor(url) {
    const u = new URL(url);
    if (u.protocol !== 'redis:') throw new Error(`not a redis:// URL: ${url}`);
    this.host = u.hostname || '127.0.0.1';
    this.port = Number(u.port || 6379);
    this.db = Number(u.pathname.slice(1) || 0);
    this.password = u.password ? decodeURIComponent(u.password) : null;
    this.socket = null;
    this.buf = Buffer.alloc(0);
    this.pending = null;
  }

  // Connect (and AUTH, SELECT) unless connected: every failure here is before our command.
  async connect() {
    if (this.socket !== null) return;
    const socket = net.createConnection({ host: this.host, port: this.port });
    socket.setNoDelay(true);
    socket.on('data', (data) => this.received(data));
    socket.on('error', (err) => this.lost(socket, err));
    socket.on('close', () => this.lost(socket, new Error('connection closed')));
    this.socket = socket;
    this.buf = Buffer.alloc(0);
    try {
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`connect timed out after ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
        socket.once('connect', () => { clearTimeout(timer); resolve(); });
        socket.once('error', (err) => { clearTimeout(timer); reject(err); });
      });
      if (this.password !== null) await this.roundTrip(['AUTH', this.password]);
      if (this.db !== 0) await this.roundTrip(['SELECT', this.db]);
    } catch (err) {
      this.drop();
      throw new Unavailable(`redis ${this.host}:${this.port} unreachable: ${err.message}`);
    }
  }

  // Send one command, wait for its reply. An error reply is thrown as a ReplyError;
  // any other failure leaves the outcome unknown.
  async call(args) {
    await this.connect();
    if (this.socket === null) throw new Unavailable(`redis ${this.host}:${this.port}: connection closed before sending`);
    try {
      return await this.roundTrip(args);
    } catch (err) {
      if (err instanceof ReplyError) throw err;
      this.drop();
      throw new Indeterminate(`redis ${args[0]}: ${err.message}`);
    }
  }

  roundTrip(args) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new Error(`no reply within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
      this.pending = {
        resolve: (v) => { clearTimeout(timer); resolve(v); },
        reject: (e) => { clearTimeout(timer); reject(e); },
      };
      this.socket.write(encode(args));
    }).then((reply) => {
      if (reply instanceof ReplyError) throw reply;
      return reply;
    });
  }

  received(data) {
    this.buf = Buffer.concat([this.buf, data]);
    if (this.pending === null) return;
    let parsed;
    try {
      parsed = parse(this.buf, 0);
    } catch (err) {
      this.fail(err);
      return;
    }
    if (parsed === null) return;
    this.buf = this.buf.subarray(parsed[1]);
    const { resolve } = this.pending;
    this.pending = null;
    resolve(parsed[0]);
  }

  fail(err) {
    if (this.pending === null) return;
    const { reject } = this.pending;
    this.pending = null;
    reject(err);
  }

  lost(socket, err) {
    if (socket !== this.socket) return;
    this.fail(err);
    this.drop();
  }

  drop() {
    if (this.socket !== null) this.socket.destroy();
    this.socket = null;
  }

  close() {
    this.drop();
  }
}

// ------------------------------------------------------------------ the lease

// Every script starts with this; KEYS: state hash, epoch counter, effect log.
const PRELUDE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local status = redis.call('HGET', KEYS[1], 'status')
local missing = {'error', 'no such node (no key ' .. KEYS[1] .. ')'}
`;

// One Lua script per operation; ARGV are the op's arguments in the order run() gets them.
const SCRIPTS = {
  add_node: `
if not status then redis.call('HSET', KEYS[1], 'status', 'READY', 'epoch', 0) end
return {'ok'}`,
  // ARGV: owner, ttl_ms. BUG: a live lease of another worker is not looked at:
  // the queue delivered the node, so take it. Only a finished node is refused.
  claim: `
if not status then return missing end
if status == 'SUCCEEDED' then return {'terminal'} end
local epoch = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'epoch', epoch, 'owner', ARGV[1], 'expires_ms', now + tonumber(ARGV[2]))
redis.call('HDEL', KEYS[1], 'result')
return {'ok', epoch}`,
  // ARGV: epoch, ttl_ms. BUG: the epoch is carried, never compared (nor in the ops below).
  renew: `
if not status then return missing end
if status == 'SUCCEEDED' then return {'terminal'} end
redis.call('HSET', KEYS[1], 'expires_ms', now + tonumber(ARGV[2]))
return {'ok'}`,
  // ARGV: epoch, payload. BUG: the resource has no fence: every effect is accepted.
  effect: `
redis.call('RPUSH', KEYS[3], cjson.encode({epoch = tonumber(ARGV[1]), payload = ARGV[2]}))
return {'ok'}`,
  // ARGV: epoch, result. BUG: whoever commits, last, wins.
  commit: `
if not status then return missing end
redis.call('HSET', KEYS[1], 'status', 'SUCCEEDED', 'result', ARGV[2])
redis.call('HDEL', KEYS[1], 'expires_ms')
return {'ok'}`,
  // ARGV: epoch
  release: `
if not status then return missing end
if status == 'SUCCEEDED' then return {'terminal'} end
redis.call('HSET', KEYS[1], 'status', 'READY')
redis.call('HDEL', KEYS[1], 'owner', 'expires_ms')
return {'ok'}`,
  read: `
return redis.call('HMGET', KEYS[1], 'status', 'epoch', 'owner', 'result')`,
  // the effect log as the resource holds it, oldest first (RPUSH); it keeps no fence, so the answer's is null
  read_resource: `
return redis.call('LRANGE', KEYS[3], 0, -1)`,
};

function keys(node) {
  return ['state', 'epoch', 'effects'].map((part) => `${PREFIX}:{${node}}:${part}`);
}

class TrustingLease {
  constructor(redis, ttlMs) {
    this.redis = redis;
    this.ttlMs = ttlMs;
  }

  async run(op, node, ...args) {
    const ks = keys(node);
    try {
      return await this.redis.call(['EVAL', PRELUDE + SCRIPTS[op], ks.length, ...ks, ...args]);
    } catch (err) {
      // LOADING: the server refused before running anything
      if (err instanceof ReplyError && err.message.startsWith('LOADING')) throw new Unavailable(err.message);
      if (err instanceof ReplyError) throw new Indeterminate(`redis ${op}: ${err.message}`);
      throw err;
    }
  }

  async handle(req) {
    const ttl = req.ttl_ms ?? this.ttlMs;
    if (['claim', 'renew'].includes(req.op) && !ttl) {
      return refused(['error', 'no ttl_ms in the request and no LEASECHECK_TTL_MS']);
    }
    if (['renew', 'effect', 'commit', 'release'].includes(req.op) && typeof req.epoch !== 'number') {
      return refused(['error', `${req.op} needs an epoch`]);
    }
    switch (req.op) {
      case 'setup':
        await this.redis.call(['PING']);
        return { ok: true };
      case 'add_nodes':
        for (const [i, node] of (req.nodes ?? []).entries()) {
          try {
            await this.run('add_node', node);
          } catch (err) {
            if (i > 0) throw new Indeterminate(err.message); // the first nodes are in
            throw err;
          }
        }
        return { ok: true };
      case 'claim': {
        const reply = await this.run('claim', req.node, req.owner, ttl);
        return reply[0] === 'ok' ? { ok: true, epoch: reply[1], token: null } : refused(reply);
      }
      case 'renew':
        return outcome(await this.run('renew', req.node, req.epoch, ttl));
      case 'effect':
        return outcome(await this.run('effect', req.node, req.epoch, req.payload ?? ''));
      case 'commit':
        return outcome(await this.run('commit', req.node, req.epoch, req.result ?? ''));
      case 'release':
        return outcome(await this.run('release', req.node, req.epoch));
      case 'read': {
        const [status, epoch, owner, result] = await this.run('read', req.node);
        if (status === null) return { ok: true, status: 'READY', epoch: 0, owner: null, result: null };
        return { ok: true, status, epoch: Number(epoch), owner: status === 'READY' ? null : owner, result };
      }
      case 'read_resource': {
        const log = await this.run('read_resource', req.node);
        const accepted = log.map((entry) => JSON.parse(entry)).map(({ epoch, payload }) => ({ epoch, payload }));
        return { ok: true, fence: null, accepted };
      }
      default:
        return refused(['error', `unknown op ${JSON.stringify(req.op)}`]);
    }
  }
}

function refused([reason, message]) {
  return message ? { ok: false, reason, message } : { ok: false, reason };
}

function outcome(reply) {
  return reply[0] === 'ok' ? { ok: true } : refused(reply);
}

// ------------------------------------------------------------------ main

function die(message) {
  process.stderr.write(`${NAME}: ${message}\n`);
  process.exit(2);
}

function send(answer) {
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}

async function main() {
  const url = process.env.LEASECHECK_URL;
  if (!url) die('LEASECHECK_URL is not set (redis://host:port/db)');
  const ttlMs = process.env.LEASECHECK_TTL_MS ? Number(process.env.LEASECHECK_TTL_MS) : null;
  if (ttlMs !== null && !Number.isInteger(ttlMs)) die(`LEASECHECK_TTL_MS=${process.env.LEASECHECK_TTL_MS} is not an integer`);
  let redis;
  try {
    redis = new Redis(url);
  } catch (err) {
    die(`LEASECHECK_URL: ${err.message}`);
  }
  const lease = new TrustingLease(redis, ttlMs);

  send({ leasecheck: 1, name: NAME, fenced: true, resource: true, bug: BUG, expected: EXPECTED });
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    let req;
    try {
      req = JSON.parse(line);
    } catch (err) {
      die(`not a JSON request (${err.message}): ${line}`);
    }
    if (req === null || typeof req !== 'object' || req.id === undefined) die(`a request without an id: ${line}`);
    let answer;
    try {
      answer = await lease.handle(req);
    } catch (err) {
      if (err instanceof Unavailable) answer = { error: 'unavailable', message: err.message };
      else if (err instanceof Indeterminate) answer = { error: 'indeterminate', message: err.message };
      else throw err;
    }
    send({ id: req.id, ...answer });
  }
  redis.close();
}

main().catch((err) => {
  process.stderr.write(`${NAME}: ${err.stack ?? err}\n`);
  process.exit(1);
});
