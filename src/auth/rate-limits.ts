import type { FastifyReply, FastifyRequest } from 'fastify';
import { LRUCache } from 'lru-cache';
import { RateLimitError } from '../foundation/errors.js';
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
    this.windows = new LRUCache({ max: maxKeys });
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

  consume(request: FastifyRequest, reply: FastifyReply, key?: string): void | Promise<void> {
    const { windowMs } = this.settings;
    const { principal } = request;
    if (!key && !principal) {
      throw new Error('a request counted against its credential before it had one');
    }
    const counted = this.counter.increment(key ?? credentialKey(principal!.credential), windowMs);
    const own = key === undefined ? principal!.restrictions?.rateLimit : undefined;
    if (own) return this.consumeBoth(reply, principal!, own, counted);
    if (counted instanceof Promise) return counted.then((window) => this.admit(reply, window));
    this.admit(reply, counted);
  }

  /** The headers of the credential's budget, and a 429 past it. */
  private admit(reply: FastifyReply, window: WindowCount): void {
    const { max } = this.settings;
    describe(reply, max, window.count, window.resetInMs);
    if (window.count > max) throw refusal([this.deploymentLimit(window)]);
  }

  private deploymentLimit(window: WindowCount): CountedLimit {
    const { max, windowMs } = this.settings;
    return { ...window, limit: max, windowMs, whose: '' };
  }

  /**
   * D32: a key with a rate of its own is counted against both limits, its own shared like the other
   * (`RateCounter`): past either it gets 429, and the headers describe the one with fewer requests
   * left. The own count is kept per window length, so that a changed window starts afresh.
   */
  private consumeBoth(
    reply: FastifyReply,
    principal: Principal,
    own: { readonly limit: number; readonly windowMs: number },
    counted: WindowCount | Promise<WindowCount>,
  ): void | Promise<void> {
    const keyId = principal.credential.kind === 'api-key' ? principal.credential.keyId : '';
    const ownCounted = this.counter.increment(`key-rate:${keyId}:${own.windowMs}`, own.windowMs);
    const judge = (deployment: WindowCount, mine: WindowCount): void => {
      const limits = [this.deploymentLimit(deployment), { ...mine, ...own, whose: "this key's own limit: " }];
      // Fewer requests left, and of two with as few, the one that resets later: it is what waits.
      const tighter = limits.reduce((a, b) =>
        left(b) < left(a) || (left(b) === left(a) && b.resetInMs > a.resetInMs) ? b : a,
      );
      describe(reply, tighter.limit, tighter.count, tighter.resetInMs);
      const exceeded = limits.filter((limit) => limit.count > limit.limit);
      if (exceeded.length > 0) throw refusal(exceeded);
    };
    if (counted instanceof Promise || ownCounted instanceof Promise) {
      return Promise.all([counted, ownCounted]).then(([deployment, mine]) => judge(deployment, mine));
    }
    judge(counted, ownCounted);
  }
}

/** A window's count beside the limit it is counted against. */
interface CountedLimit extends WindowCount {
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
