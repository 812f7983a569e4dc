import type { FastifyReply, FastifyRequest } from 'fastify';
import { LRUCache } from 'lru-cache';
import { RateLimitError } from '../errors.js';
import type { Credential } from './principal.js';

/**
 * Counts hits per key in fixed windows. The only state rate limiting keeps, behind an interface we
 * own: the in-memory counter below serves one process; a Redis counter (INCR + PEXPIRE in one script)
 * shares the counts between instances (D10, `PLAYBOOK_REDIS_URL`) without other changes.
 */
export interface RateCounter {
  /** Adds one hit to `key`'s current window (opening one when none is running). */
  increment(key: string, windowMs: number): Promise<WindowCount>;
  /** The current window's count, without adding a hit. */
  peek(key: string, windowMs: number): Promise<WindowCount>;
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

  async increment(key: string, windowMs: number): Promise<WindowCount> {
    const now = this.now();
    const current = this.windows.get(key);
    const window = current && now - current.startedAt < windowMs ? current : { count: 0, startedAt: now };
    window.count++;
    this.windows.set(key, window);
    return { count: window.count, resetInMs: window.startedAt + windowMs - now };
  }

  async peek(key: string, windowMs: number): Promise<WindowCount> {
    const now = this.now();
    const current = this.windows.get(key);
    if (!current || now - current.startedAt >= windowMs) return { count: 0, resetInMs: windowMs };
    return { count: current.count, resetInMs: current.startedAt + windowMs - now };
  }
}

/** What the auth hook asks of rate limiting, in the order it asks (D10). */
export interface AccessLimiter {
  /** Before any credential work: an address over its failed-authentication budget gets a 429. */
  admit(request: FastifyRequest, reply: FastifyReply): Promise<void>;
  /** After a refused credential: counts the failure against the address. */
  recordFailure(request: FastifyRequest, reply: FastifyReply): Promise<void>;
  /**
   * Counts the request against its credential (the key id or the token subject), or its address when
   * it has none; sets the `RateLimit-*` headers; a 429 with `Retry-After` when over the budget.
   */
  consume(request: FastifyRequest, reply: FastifyReply): Promise<void>;
}

export interface RateLimitSettings {
  /** Requests per credential per window. */
  readonly max: number;
  readonly windowMs: number;
  /** Failed authentications per client address per window. */
  readonly authFailureMax: number;
}

/** The rate-limit key of a credential; key ids and subjects never collide with addresses. */
export function credentialKey(credential: Credential): string {
  return credential.kind === 'api-key' ? `key:${credential.keyId}` : `user:${credential.subject}`;
}

function seconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/**
 * Rate limits of D10, counted by a `RateCounter` (this process's, or Redis's shared by every
 * instance). The auth hook calls them in order: `admit` before any credential work, then
 * `recordFailure` or `consume`, so that every answer, refusals included, carries the
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

  async admit(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const { authFailureMax, windowMs } = this.settings;
    const { count, resetInMs } = await this.counter.peek(failureKey(request), windowMs);
    if (count < authFailureMax) return;
    describe(reply, authFailureMax, count, resetInMs);
    throw new RateLimitError(
      'too many failed authentications from this address; retry later',
      seconds(resetInMs),
    );
  }

  async recordFailure(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    // On a refusal the headers describe the address's remaining failed-authentication budget.
    const { count, resetInMs } = await this.counter.increment(failureKey(request), this.settings.windowMs);
    describe(reply, this.settings.authFailureMax, count, resetInMs);
  }

  async consume(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const { max, windowMs } = this.settings;
    const key = request.principal ? credentialKey(request.principal.credential) : `address:${request.ip}`;
    const { count, resetInMs } = await this.counter.increment(key, windowMs);
    describe(reply, max, count, resetInMs);
    if (count > max) {
      const retryAfter = seconds(resetInMs);
      throw new RateLimitError(
        `at most ${max} requests per ${seconds(windowMs)} s; retry in ${retryAfter} s`,
        retryAfter,
      );
    }
  }
}

function failureKey(request: FastifyRequest): string {
  return `auth-failures:${request.ip}`;
}

function describe(reply: FastifyReply, limit: number, count: number, resetInMs: number): void {
  reply.header('ratelimit-limit', limit);
  reply.header('ratelimit-remaining', Math.max(0, limit - count));
  reply.header('ratelimit-reset', seconds(resetInMs));
}
