"""The Redis quota backend: every limit of a request checked and charged in one Lua
script, all or nothing, so any number of routers share limits without overshoot.

Counters of one tenant share a ``{tenant}`` hash tag. Reservation keys are named by
request id alone (Commit and Release carry nothing else), so the scripts expect a
standalone Redis (or Sentinel), not Redis Cluster. A reservation is a hash that
remembers its verdict, its lease (``until``) and, once committed, the answer kept for
repeats, so Reserve, Commit and Release are idempotent. A tenant's kept answers are
bounded by a ledger of their sizes (``{tenant}:kept``), as the memory backend bounds them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis

from ferryman_server.kernel.quota import Decision, ReserveCall, Verdict, Violation
from ferryman_server.quota.policy import CHARGE_MEMORY_S, CONCURRENCY_RETRY_S, DAY_S, WINDOW_S, Limits

# Every script starts with a shebang (Redis 7): a Redis at its maxmemory (noeviction, as
# the chart runs it) then refuses the script before it starts, with an OOM error. Without
# one, Redis ran them past maxmemory: the store grew on while plain writes were refused.
KEY_PREFIX = "fm:q:"
STALE = "stale"
NO_LIMIT = -1

RESERVE = """#!lua
local now, rid = tonumber(ARGV[1]), ARGV[2]
local tokens, cost, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local prefix, n = ARGV[6], tonumber(ARGV[7])
local fp, lease, give_up, conc_wait = ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local min_tokens, cpt = tonumber(ARGV[12]), tonumber(ARGV[13])
-- The windows of policy.py (WINDOW_S, DAY_S), passed in so the two never disagree.
local WINDOW, DAY = tonumber(ARGV[14]), tonumber(ARGV[15])
local P = 16
local function base_of(scope) return prefix .. '{' .. string.match(scope, '^[^/]+') .. '}:' .. scope end
-- policy.check_rate: the request-rate limits one more request would break, told to brk;
-- returns the burst bucket's level now (nil without a burst limit).
local function check_rate(base, rpm, burst, soft, brk)
  if rpm >= 0 then
    redis.call('ZREMRANGEBYSCORE', base .. ':log', '-inf', now - WINDOW)
    local count = redis.call('ZCARD', base .. ':log')
    if count + 1 > rpm then
      local oldest = redis.call('ZRANGE', base .. ':log', 0, 0, 'WITHSCORES')
      local wait = WINDOW
      if oldest[2] then wait = tonumber(oldest[2]) + WINDOW - now end
      brk('rpm', count, rpm, wait, soft)
    end
  end
  if burst < 0 then return nil end
  local rate = (rpm >= 0 and rpm or burst) / WINDOW
  local b = redis.call('HMGET', base .. ':burst', 't', 'at')
  local level = burst
  if b[1] then level = math.min(burst, tonumber(b[1]) + (now - tonumber(b[2])) * rate) end
  if level < 1 then brk('burst', burst - level, burst, (1 - level) / rate, soft) end
  return level
end
-- policy.count_rate: one more request (``key`` in the rpm log), out of the burst bucket.
local function count_rate(base, key, burst, level)
  redis.call('ZADD', base .. ':log', now, key)
  redis.call('PEXPIRE', base .. ':log', WINDOW)
  if burst >= 0 then
    redis.call('HSET', base .. ':burst', 't', level - 1, 'at', now)
    redis.call('PEXPIRE', base .. ':burst', DAY)
  end
end
local known = redis.call('HMGET', KEYS[1], 'verdict', 'fp', 'state', 'expired', 'until', 'answer', 'scopes')
if known[1] then
  if known[2] ~= fp then return {cjson.encode({'conflict', 0, {}, 0})} end
  local running = known[3] == 'reserved' and not known[4] and tonumber(known[5] or now) > now
  if known[3] == 'reserved' and not running then
    -- Its caller died (the lease ran out unsettled): this repeat takes the reservation
    -- over and runs the request, whose first charge stays its only one.
    for base in string.gmatch(known[7] or '', '[^\\n]+') do
      redis.call('ZADD', base .. ':inflight', now + lease, rid)
      redis.call('PEXPIRE', base .. ':inflight', 2 * ttl)
    end
    redis.call('HDEL', KEYS[1], 'expired')
    redis.call('HSET', KEYS[1], 'until', now + lease)
    redis.call('PEXPIRE', KEYS[1], 2 * ttl)
    return {known[1]}
  end
  if not running then
    -- A repeat answered from here is a request as far as the rate limits go (rpm, burst:
    -- policy.check_rate, count_rate): replays are not free.
    local broken, wait, over, levels = {}, 0, false, {}
    local function brk(limit, current, maximum, w, soft)
      table.insert(broken, {limit, current, maximum})
      if not soft then over = true; wait = math.max(wait, w) end
    end
    for i = 0, n - 1 do
      local o = P + i * 7
      local rpm, burst, soft = tonumber(ARGV[o+1]), tonumber(ARGV[o+2]), ARGV[o+6] == '1'
      levels[i] = check_rate(base_of(ARGV[o]), rpm, burst, soft, brk)
    end
    if over then return {cjson.encode({'reject', wait, broken, 0})} end
    local key = rid .. '#' .. redis.call('INCR', prefix .. 'replays')
    for i = 0, n - 1 do
      local o = P + i * 7
      count_rate(base_of(ARGV[o]), key, tonumber(ARGV[o+2]), levels[i])
    end
  end
  -- A retry is answered as the first call was (with its kept answer, binary, beside the
  -- verdict); only that first call settles.
  local verdict = cjson.decode(known[1])
  verdict[5] = 'retry'
  return {cjson.encode(verdict), running and '1' or '0', known[6] or ''}
end
-- A partial ask takes the most tokens every hard tpm and cost limit leaves, down to
-- min_tokens (policy.grant); when not even that fits, min_tokens, refused below.
local asked = tokens
if min_tokens > 0 and min_tokens < tokens then
  local fixed, most = cost - tokens * cpt, tokens
  local day0 = math.floor(now / DAY)
  for i = 0, n - 1 do
    local o = P + i * 7
    local tpm, costl, soft = tonumber(ARGV[o+3]), tonumber(ARGV[o+4]), ARGV[o+6] == '1'
    local base = base_of(ARGV[o])
    if not soft and tpm >= 0 then
      local b = redis.call('HMGET', base .. ':tpm', 't', 'at')
      local level = tpm
      if b[1] then level = math.min(tpm, tonumber(b[1]) + (now - tonumber(b[2])) * tpm / WINDOW) end
      most = math.min(most, math.floor(level))
    end
    if not soft and costl >= 0 and cpt > 0 then
      local spent = tonumber(redis.call('GET', base .. ':cost:' .. day0) or '0')
      local fits = math.floor((costl - spent - fixed) / cpt)
      while fits > 0 and spent + fixed + fits * cpt > costl do fits = fits - 1 end
      most = math.min(most, fits)
    end
  end
  tokens = math.max(most, min_tokens)
  cost = math.max(0, fixed + tokens * cpt)
end
-- A script that waited in a socket past its caller's give-up time charges nothing:
-- that caller has answered already and will never settle it.
local clock = redis.call('TIME')
if tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) > give_up then
  return {cjson.encode({'stale', 0, {}, 0})}
end
local day = math.floor(now / DAY)
local broken, plans = {}, {}
local hard_wait, any_hard = 0, false
local function brk(limit, current, maximum, wait, soft)
  table.insert(broken, {limit, current, maximum})
  if not soft then any_hard = true; if wait > hard_wait then hard_wait = wait end end
end
for i = 0, n - 1 do
  local o = P + i * 7
  local scope, rpm, burst, tpm = ARGV[o], tonumber(ARGV[o+1]), tonumber(ARGV[o+2]), tonumber(ARGV[o+3])
  local costl, conc, soft = tonumber(ARGV[o+4]), tonumber(ARGV[o+5]), ARGV[o+6] == '1'
  local base = base_of(scope)
  local inflight = base .. ':inflight'
  local gone = redis.call('ZRANGEBYSCORE', inflight, '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', inflight, '-inf', now)
    for _, g in ipairs(gone) do
      if redis.call('HSETNX', prefix .. 'res:' .. g, 'expired', '1') == 1 then redis.call('INCR', KEYS[2]) end
    end
  end
  local plan = {base = base, burst = burst, tpm = tpm, rpm = rpm}
  plan.burst_level = check_rate(base, rpm, burst, soft, brk)
  if tpm >= 0 then
    local rate = tpm / WINDOW
    local b = redis.call('HMGET', base .. ':tpm', 't', 'at')
    local level = tpm
    if b[1] then level = math.min(tpm, tonumber(b[1]) + (now - tonumber(b[2])) * rate) end
    plan.tpm_level = level
    if level < tokens then
      local wait = WINDOW
      if tokens <= tpm then wait = (tokens - level) / rate end
      brk('tpm', tpm - level, tpm, wait, soft)
    end
  end
  if costl >= 0 then
    local spent = tonumber(redis.call('GET', base .. ':cost:' .. day) or '0')
    if spent + cost > costl then brk('cost_per_day', spent, costl, (day + 1) * DAY - now, soft) end
  end
  if conc >= 0 then
    local live = redis.call('ZCARD', inflight)
    if live + 1 > conc then brk('max_concurrency', live, conc, conc_wait, soft) end
  end
  table.insert(plans, plan)
end
local decision = 'admit'
if any_hard then decision = 'reject' elseif #broken > 0 then decision = 'degrade' end
local granted = 0
if tokens < asked then granted = tokens end
local result = cjson.encode({decision, hard_wait, broken, granted})
-- A refusal charges nothing and is not remembered: a retry after retry_after is judged anew.
if decision == 'reject' then return {result} end
local scopes = {}
for _, p in ipairs(plans) do
  table.insert(scopes, p.base)
  count_rate(p.base, rid, p.burst, p.burst_level)
  if p.tpm >= 0 then
    redis.call('HSET', p.base .. ':tpm', 't', p.tpm_level - tokens, 'at', now)
    redis.call('PEXPIRE', p.base .. ':tpm', DAY)
  end
  redis.call('INCRBYFLOAT', p.base .. ':cost:' .. day, cost)
  redis.call('PEXPIRE', p.base .. ':cost:' .. day, 2 * DAY)
  redis.call('ZADD', p.base .. ':inflight', now + lease, rid)
  redis.call('PEXPIRE', p.base .. ':inflight', 2 * ttl)
end
redis.call('HSET', KEYS[1], 'verdict', result, 'state', 'reserved', 'tokens', tokens, 'cost', cost,
  'day', day, 'fp', fp, 'scopes', table.concat(scopes, '\\n'), 'until', now + lease)
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return {result}
"""

SETTLE = """#!lua
local now, rid = tonumber(ARGV[1]), ARGV[2]
local actual_tokens, actual_cost, refund = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == '1'
local answer, ttl, prefix, budget = ARGV[6], tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
local r = redis.call('HMGET', KEYS[1], 'state', 'expired', 'tokens', 'cost', 'day', 'scopes', 'until')
if r[1] ~= 'reserved' then return 0 end
-- A lease that ran out unrenewed (its caller died) ended the reservation, charged in full;
-- it stays 'reserved' so that a repeat can take it over.
if r[2] or tonumber(r[7] or now + 1) <= now then return 0 end
redis.call('HSET', KEYS[1], 'state', 'settled')
if answer ~= '' then
  -- The tenant's kept answers are a ledger (id -> size, id -> when it is forgotten) and
  -- their total: past the budget an answer is not kept, and its repeats are refused.
  local ledger = prefix .. '{' .. string.match(rid, '^[^/]*') .. '}:kept'
  local sizes, total = ledger .. ':sizes', ledger .. ':bytes'
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', ledger, '-inf', now, 'LIMIT', 0, 64)) do
    redis.call('DECRBY', total, tonumber(redis.call('HGET', sizes, g) or '0'))
    redis.call('HDEL', sizes, g)
    redis.call('ZREM', ledger, g)
  end
  local before = tonumber(redis.call('HGET', sizes, rid) or '0')
  if tonumber(redis.call('GET', total) or '0') - before + #answer <= budget then
    redis.call('HSET', KEYS[1], 'answer', answer)
    redis.call('PEXPIRE', KEYS[1], 2 * ttl)
    redis.call('ZADD', ledger, now + 2 * ttl, rid)
    redis.call('HSET', sizes, rid, #answer)
    redis.call('INCRBY', total, #answer - before)
    for _, k in ipairs({ledger, sizes, total}) do redis.call('PEXPIRE', k, 2 * ttl) end
  end
end
local tokens, cost, day = tonumber(r[3]), tonumber(r[4]), r[5]
local token_delta, cost_delta = actual_tokens - tokens, actual_cost - cost
if refund then token_delta, cost_delta = -tokens, -cost end
for base in string.gmatch(r[6], '[^\\n]+') do
  redis.call('ZREM', base .. ':inflight', rid)
  if redis.call('EXISTS', base .. ':tpm') == 1 then
    redis.call('HINCRBYFLOAT', base .. ':tpm', 't', -token_delta)
  end
  if redis.call('EXISTS', base .. ':cost:' .. day) == 1 then
    redis.call('INCRBYFLOAT', base .. ':cost:' .. day, cost_delta)
  end
  if refund and redis.call('ZREM', base .. ':log', rid) == 1 then
    if redis.call('EXISTS', base .. ':burst') == 1 then
      redis.call('HINCRBYFLOAT', base .. ':burst', 't', 1)
    end
  end
end
-- Nothing was served under a released id: a retry is a first request, charged once.
if refund then redis.call('DEL', KEYS[1]) end
return 1
"""

RENEW = """#!lua
local now, lease, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local renewed = 0
for i = 4, #ARGV do
  local rid = ARGV[i]
  local key = prefix .. 'res:' .. rid
  local r = redis.call('HMGET', key, 'state', 'expired', 'scopes', 'until')
  if r[1] == 'reserved' and not r[2] and tonumber(r[4] or now + 1) > now then
    for base in string.gmatch(r[3], '[^\\n]+') do
      redis.call('ZADD', base .. ':inflight', 'XX', now + lease, rid)
    end
    redis.call('HSET', key, 'until', now + lease)
    renewed = renewed + 1
  end
end
return renewed
"""
# Charge: an account's total cost so far (KEYS[1] holds what it was charged before); the
# difference, if any, goes to each policy's spend of the day (the caller's clock, as RESERVE).
# ARGV: now (ms), total, remember_ms, prefix, day (ms), n, then per policy: scope, cost limit,
# soft.
CHARGE = """#!lua
local now, total, remember = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local prefix, DAY, n = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local day = math.floor(now / DAY)
local delta = math.max(0, total - tonumber(redis.call('GET', KEYS[1]) or '0'))
local over = 0
for i = 0, n - 1 do
  local o = 7 + i * 3
  local scope, costl, soft = ARGV[o], tonumber(ARGV[o + 1]), ARGV[o + 2] == '1'
  local key = prefix .. '{' .. string.match(scope, '^[^/]+') .. '}:' .. scope .. ':cost:' .. day
  local spent
  if delta > 0 then
    spent = tonumber(redis.call('INCRBYFLOAT', key, delta))
    redis.call('PEXPIRE', key, 2 * DAY)
  else
    spent = tonumber(redis.call('GET', key) or '0')
  end
  if not soft and costl >= 0 and spent >= costl then over = 1 end
end
if delta > 0 then redis.call('SET', KEYS[1], tostring(total), 'PX', remember) end
return {tostring(delta), over}
"""
WINDOW_MS = int(WINDOW_S * 1000)
DAY_MS = int(DAY_S * 1000)
CLOCK_CHECK_S = 30.0
"""How often the offset between this process's clock and Redis's is measured again."""


Queued = tuple[list[str], list[str | int | float], "asyncio.Future[list[Any]]"]
"""A reserve script waiting for its turn's pipeline: keys, args, the caller's answer."""


def _limit(value: float | None) -> float:
    return NO_LIMIT if value is None else value


class RedisQuota:
    """Quota counters in Redis, shared by every router and quota server."""

    def __init__(
        self,
        client: aioredis.Redis,
        reservation_ttl_s: float,
        kept_per_tenant_bytes: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = client
        self._ttl_ms = int(reservation_ttl_s * 1000)
        self._kept_budget = kept_per_tenant_bytes
        self._clock = clock
        self._reserve = client.register_script(RESERVE)
        self._settle = client.register_script(SETTLE)
        self._renew = client.register_script(RENEW)
        self._charge = client.register_script(CHARGE)
        self._pending: list[Queued] = []
        self._running: set[asyncio.Task[None]] = set()
        self._offset_s = 0.0
        """Redis's clock minus ours, so a give-up time can be said in Redis's clock."""
        self._offset_at = -CLOCK_CHECK_S

    @staticmethod
    def _tag(request_id: str) -> str:
        return f"{KEY_PREFIX}res:{request_id}"

    def _ms(self) -> int:
        return int(self._clock() * 1000)

    async def _redis_offset(self) -> float:
        now = self._clock()
        if now - self._offset_at >= CLOCK_CHECK_S:
            seconds, micros = await self._redis.time()
            after = self._clock()
            self._offset_s = seconds + micros / 1e6 - (now + after) / 2
            self._offset_at = after
        return self._offset_s

    async def reserve(
        self, call: ReserveCall, policies: Sequence[Limits], lease_s: float, budget_s: float
    ) -> Verdict:
        give_up = (self._clock() + await self._redis_offset() + budget_s) * 1000
        args: list[str | int | float] = [
            self._ms(),
            call.request_id,
            call.ask.tokens,
            call.ask.cost,
            self._ttl_ms,
            KEY_PREFIX,
            len(policies),
            call.fingerprint,
            int(lease_s * 1000),
            int(give_up),
            int(CONCURRENCY_RETRY_S * 1000),
            call.ask.min_tokens,
            repr(call.ask.cost_per_token),
            WINDOW_MS,
            DAY_MS,
        ]
        for p in policies:
            args += [
                p.scope,
                _limit(p.rpm),
                _limit(p.burst),
                _limit(p.tpm),
                _limit(p.cost_per_day_usd),
                _limit(p.max_concurrency),
                "1" if p.soft else "0",
            ]
        raw, *repeat = await self._queued([self._tag(call.request_id), f"{KEY_PREFIX}expired"], args)
        decision, wait_ms, broken, granted, *retry = json.loads(raw)
        if decision == STALE:
            raise TimeoutError("the reservation reached Redis after its caller gave up")
        violations = tuple(Violation(str(v[0]), float(v[1]), float(v[2])) for v in broken or [])
        held = not retry and Decision(decision) not in (Decision.REJECT, Decision.CONFLICT)
        return Verdict(
            Decision(decision),
            violations,
            float(wait_ms) / 1000,
            held=held,
            tokens=int(granted or 0),
            repeat=bool(retry),
            running=bool(repeat) and repeat[0] == b"1",
            answer=bytes(repeat[1]) if repeat else b"",
        )

    async def _queued(self, keys: list[str], args: list[str | int | float]) -> list[Any]:
        """The reserve script's result, run with the others queued in this turn of the event
        loop in one pipeline: one round trip for a burst (a ReserveMany's calls arrive
        together) instead of one each."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[Any]] = loop.create_future()
        self._pending.append((keys, args, answer))
        if len(self._pending) == 1:
            loop.call_soon(self._run_pending)
        return await answer

    def _run_pending(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.create_task(self._run(batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[Queued]) -> None:
        live = [entry for entry in batch if not entry[2].done()]
        if not live:
            return
        pipe = self._redis.pipeline(transaction=False)
        try:
            for keys, args, _ in live:
                await self._reserve(keys=keys, args=args, client=pipe)
            results = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # the backend failed them all alike: each caller is told
            results = [exc] * len(live)
        for (_, _, answer), result in zip(live, results, strict=True):
            if answer.done():
                continue
            if isinstance(result, BaseException):
                answer.set_exception(result)
            else:
                answer.set_result(result)

    async def renew(self, request_ids: Sequence[str], lease_s: float) -> int:
        if not request_ids:
            return 0
        args: list[str | int | float] = [self._ms(), int(lease_s * 1000), KEY_PREFIX, *request_ids]
        return int(await self._renew(keys=[], args=args))

    async def commit(self, request_id: str, tokens: int, cost: float, answer: bytes = b"") -> bool:
        return await self._settle_call(request_id, tokens, cost, "0", answer)

    async def release(self, request_id: str) -> bool:
        return await self._settle_call(request_id, 0, 0, "1", b"")

    async def _settle_call(
        self, request_id: str, tokens: int, cost: float, refund: str, answer: bytes
    ) -> bool:
        args: list[str | int | float | bytes] = [
            self._ms(),
            request_id,
            tokens,
            cost,
            refund,
            answer,
            self._ttl_ms,
            KEY_PREFIX,
            self._kept_budget,
        ]
        return bool(await self._settle(keys=[self._tag(request_id)], args=args))

    async def charge(
        self, charge_id: str, policies: Sequence[Limits], total_cost: float
    ) -> tuple[float, bool]:
        args: list[str | int | float] = [
            self._ms(),
            total_cost,
            int(CHARGE_MEMORY_S * 1000),
            KEY_PREFIX,
            DAY_MS,
            len(policies),
        ]
        for p in policies:
            args += [p.scope, _limit(p.cost_per_day_usd), "1" if p.soft else "0"]
        delta, over = await self._charge(keys=[f"{KEY_PREFIX}charge:{charge_id}"], args=args)
        return float(delta), bool(over)

    async def warm(self) -> None:
        """Load the scripts (a burst's first pipeline would otherwise find them missing and
        load them on its own time) and open a connection."""
        for script in (self._reserve, self._settle, self._renew, self._charge):
            await self._redis.script_load(script.script)

    async def expired_count(self) -> int:
        return int(await self._redis.get(f"{KEY_PREFIX}expired") or 0)

    async def usage(self, policies: Sequence[Limits]) -> list[tuple[str, float, float, str]]:
        now_ms = int(self._clock() * 1000)
        day = int(now_ms // (DAY_S * 1000))
        rows: list[tuple[str, float, float, str]] = []
        for p in policies:
            base = f"{KEY_PREFIX}{{{p.scope.split('/')[0]}}}:{p.scope}"
            mode = "soft" if p.soft else "hard"
            if p.rpm is not None:
                count = await self._redis.zcount(f"{base}:log", now_ms - WINDOW_MS, "+inf")
                rows.append((f"{p.scope}:rpm", float(count), p.rpm, mode))
            if p.tpm is not None:
                t, at = await self._redis.hmget(f"{base}:tpm", ["t", "at"])
                level = float(p.tpm)
                if t is not None and at is not None:
                    level = min(p.tpm, float(t) + (now_ms - float(at)) * p.tpm / WINDOW_MS)
                rows.append((f"{p.scope}:tpm", p.tpm - level, p.tpm, mode))
            if p.cost_per_day_usd is not None:
                spent = float(await self._redis.get(f"{base}:cost:{day}") or 0)
                rows.append((f"{p.scope}:cost_per_day", spent, p.cost_per_day_usd, mode))
            if p.max_concurrency is not None:
                live = await self._redis.zcount(f"{base}:inflight", now_ms, "+inf")
                rows.append((f"{p.scope}:max_concurrency", float(live), p.max_concurrency, mode))
        return rows
