import type { FastifyReply, FastifyRequest } from 'fastify';
import type { LRUCache } from 'lru-cache';
import { RateLimitError } from '../foundation/errors.js';
import { growingCache } from '../foundation/growing-cache.js';
import { credentialKey, type Principal } from './principal.js';

/**
 * Counts hits per key in fixed windows. The only state rate limiting keeps, behind an interface we
 * own: the in-memory counter below serves one process; a Redis counter (INCR + PEXPIRE in one script)
 * shares the counts between instances (D10, `PLAYBOOK_REDIS_URL`) without other changes.
 */
export interface RateCounter {
  /**
   * Adds one hit to `key`'s current window (opening one when none is running). A counter in this
   * process answers at once; one shared over the network answers with a promise.
   */
  increment(key: string, windowMs: number): WindowCount | Promise<WindowCount>;
}

export interface WindowCount {
  readonly count: number;
  /** Milliseconds until the window closes and the count starts again from zero. */
  readonly resetInMs: number;
}

/** Fixed windows in process memory; the least recently used keys go first past `maxKeys`. */
export class MemoryRateCounter implements RateCounter {
  private readonly windows: LRUCache<string, { count: number; startedAt: number }>;

  constructor(
    private readonly now: () => number = Date.now,
    maxKeys = 100_000,
  ) {
    this.windows = growingCache(maxKeys);
  }

  increment(key: string, windowMs: number): WindowCount {
    const now = this.now();
    // `get` already makes the key the most recently used: a running window is counted in place.
    let window = this.windows.get(key);
    if (!window || now - window.startedAt >= windowMs) {
      window = { count: 0, startedAt: now };
      this.windows.set(key, window);
    }
    window.count++;
    return { count: window.count, resetInMs: window.startedAt + windowMs - now };
  }
}

/**
 * Where a request counted before its route's hooks run (the fast path, routes/memory-reads.ts) keeps
 * its window, on the Node request: the hooks then describe and judge that window rather than counting
 * the request again.
 */
export const COUNTED_WINDOW = Symbol('counted window');

/** A Node request that may carry the limits it was counted against. */
export interface CountedRequest {
  [COUNTED_WINDOW]?: CountedLimits;
}

/** A request counted against each limit of its credential: the deployment's (D10), and a key's own (D32). */
export interface CountedLimits {
  /** What the `RateLimit-*` headers describe: the limit with fewer requests left. */
  readonly shown: CountedLimit;
  /** The limits the request went past: none when it is admitted. */
  readonly exceeded: readonly CountedLimit[];
}

/** What the auth hook asks of rate limiting (D10). */
export interface AccessLimiter {
  /**
   * After a refused credential: counts the failure against the address and sets the `RateLimit-*`
   * headers of its budget; past the budget, throws a 429 with `Retry-After` in place of the refusal.
   */
  recordFailure(request: FastifyRequest, reply: FastifyReply): Promise<void>;
  /**
   * Counts the request against its credential (the key id or the token subject), or against `key`
   * when the credential is not a principal (a leak report's signing key); sets the `RateLimit-*`
   * headers; a 429 with `Retry-After` when over the budget. Done at once (a throw for the 429) when
   * the counter is in this process, else a promise.
   */
  consume(request: FastifyRequest, reply: FastifyReply, key?: string): void | Promise<void>;
  /**
   * Counts one request of `credential`, as `consume` does, and returns its window without judging it:
   * the fast path's count, which then sends the headers (`rateLimitHeaders`) or, past the limit, hands
   * the request with its window (`COUNTED_WINDOW`) to the hooks that refuse it. Absent, the fast path
   * counts nothing, as `consume` then counts nothing.
   */
  count?(principal: Principal): CountedLimits | Promise<CountedLimits>;
}

export interface RateLimitSettings {
  /** Requests per credential per window. */
  readonly max: number;
  readonly windowMs: number;
  /** Failed authentications per client address per window. */
  readonly authFailureMax: number;
}

function seconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/**
 * Rate limits of D10, counted by a `RateCounter` (this process's, or Redis's shared by every
 * instance). The auth hook calls `recordFailure` or `consume` once it knows whether the credential
 * holds, so that every answer of an authenticated route, refusals included, carries the
 * `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` headers (seconds), and a 429 its
 * `Retry-After`.
 *
 * Written here rather than with `@fastify/rate-limit`: once counting sits behind our own counter and
 * is called from our own hook, what the plugin added was its per-request machinery, measured at a
 * tenth of a cached read's time.
 */
export class RateLimits implements AccessLimiter {
  constructor(
    private readonly settings: RateLimitSettings,
    private readonly counter: RateCounter,
  ) {}

  async recordFailure(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const { authFailureMax, windowMs } = this.settings;
    // On a refusal the headers describe the address's remaining failed-authentication budget.
    const { count, resetInMs } = await this.counter.increment(`auth-failures:${request.ip}`, windowMs);
    describe(reply, authFailureMax, count, resetInMs);
    if (count > authFailureMax) {
      throw new RateLimitError(
        'too many failed authentications from this address; retry later',
        seconds(resetInMs),
      );
    }
  }

  count(principal: Principal): CountedLimits | Promise<CountedLimits> {
    const counted = this.counter.increment(credentialKey(principal.credential), this.settings.windowMs);
    const own = principal.restrictions?.rateLimit;
    if (!own) {
      return counted instanceof Promise
        ? counted.then((window) => limitsOf([this.deploymentLimit(window)]))
        : limitsOf([this.deploymentLimit(counted)]);
    }
    const ownCounted = this.counter.increment(ownKey(principal, own.windowMs), own.windowMs);
    const both = (deployment: WindowCount, mine: WindowCount) =>
      limitsOf([
        this.deploymentLimit(deployment),
        { count: mine.count, resetInMs: mine.resetInMs, ...own, whose: "this key's own limit: " },
      ]);
    if (counted instanceof Promise || ownCounted instanceof Promise) {
      return Promise.all([counted, ownCounted]).then(([deployment, mine]) => both(deployment, mine));
    }
    return both(counted, ownCounted);
  }

  /**
   * D32: a key with a rate of its own is counted against both limits, its own shared like the other
   * (`RateCounter`): past either it gets 429, and the headers describe the one with fewer requests
   * left. The own count is kept per window length, so that a changed window starts afresh.
   */
  consume(request: FastifyRequest, reply: FastifyReply, key?: string): void | Promise<void> {
    const before = (request.raw as CountedRequest)[COUNTED_WINDOW];
    if (before !== undefined && key === undefined) return judge(reply, before);
    const { principal } = request;
    if (key !== undefined) {
      const counted = this.counter.increment(key, this.settings.windowMs);
      if (counted instanceof Promise) {
        return counted.then((window) => judge(reply, limitsOf([this.deploymentLimit(window)])));
      }
      return judge(reply, limitsOf([this.deploymentLimit(counted)]));
    }
    if (!principal) throw new Error('a request counted against its credential before it had one');
    const counted = this.count(principal);
    if (counted instanceof Promise) return counted.then((limits) => judge(reply, limits));
    judge(reply, counted);
  }

  private deploymentLimit({ count, resetInMs }: WindowCount): CountedLimit {
    const { max, windowMs } = this.settings;
    // Built field by field rather than spread: this runs on every request.
    return { count, resetInMs, limit: max, windowMs, whose: '' };
  }
}

/** Where a key's own rate (D32) is counted: per window length, so that a changed window starts afresh. */
function ownKey(principal: Principal, windowMs: number): string {
  const keyId = principal.credential.kind === 'api-key' ? principal.credential.keyId : '';
  return `key-rate:${keyId}:${windowMs}`;
}

const NONE: readonly CountedLimit[] = [];

/** The limits a request was counted against, judged. */
function limitsOf(limits: readonly CountedLimit[]): CountedLimits {
  let shown = limits[0]!;
  // The common case, one limit: no search, and no list made of what it went past unless it did.
  if (limits.length === 1) return { shown, exceeded: shown.count > shown.limit ? limits : NONE };
  // Fewer requests left, and of two with as few, the one that resets later: it is what waits.
  for (const limit of limits) {
    if (left(limit) < left(shown) || (left(limit) === left(shown) && limit.resetInMs > shown.resetInMs)) {
      shown = limit;
    }
  }
  return { shown, exceeded: limits.filter((limit) => limit.count > limit.limit) };
}

/** The headers of the limit with fewer requests left, and a 429 past any. */
function judge(reply: FastifyReply, { shown, exceeded }: CountedLimits): void {
  describe(reply, shown.limit, shown.count, shown.resetInMs);
  if (exceeded.length > 0) throw refusal(exceeded);
}

/** A window's count beside the limit it is counted against. */
export interface CountedLimit extends WindowCount {
  readonly limit: number;
  readonly windowMs: number;
  /** How the refusal's message names the limit: empty for the deployment's. */
  readonly whose: string;
}

function left(limit: CountedLimit): number {
  return Math.max(0, limit.limit - limit.count);
}

/** The 429 of the limits a request went past, retried once the last of their windows closes. */
function refusal(exceeded: readonly CountedLimit[]): RateLimitError {
  const retryAfter = seconds(Math.max(...exceeded.map((limit) => limit.resetInMs)));
  const [first] = exceeded;
  return new RateLimitError(
    `${first!.whose}at most ${first!.limit} requests per ${seconds(first!.windowMs)} s; retry in ${retryAfter} s`,
    retryAfter,
  );
}

function describe(reply: FastifyReply, limit: number, count: number, resetInMs: number): void {
  reply.header('ratelimit-limit', limit);
  reply.header('ratelimit-remaining', Math.max(0, limit - count));
  reply.header('ratelimit-reset', seconds(resetInMs));
}

/** The `RateLimit-*` headers of a window of `limit` requests, as `consume` sets them, as raw header pairs. */
export function rateLimitHeaders(limit: number, { count, resetInMs }: WindowCount): string[] {
  return [
    'ratelimit-limit',
    String(limit),
    'ratelimit-remaining',
    String(Math.max(0, limit - count)),
    'ratelimit-reset',
    String(seconds(resetInMs)),
  ];
}
