import rateLimit, { type FastifyRateLimitStore } from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
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

/**
 * `@fastify/rate-limit`'s store contract, served by a `RateCounter`. The library keeps what it is good
 * at (headers, the 429, key generation); the counts live behind our interface.
 */
function storeOf(counter: RateCounter) {
  return class CounterStore implements FastifyRateLimitStore {
    incr(
      key: string,
      callback: (error: Error | null, result?: { current: number; ttl: number }) => void,
      timeWindow?: number,
    ): void {
      counter.increment(key, timeWindow ?? 60_000).then(
        ({ count, resetInMs }) => callback(null, { current: count, ttl: resetInMs }),
        (error: unknown) => callback(error instanceof Error ? error : new Error(String(error))),
      );
    }

    child(): FastifyRateLimitStore {
      return new CounterStore();
    }
  };
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
 * Rate limits of D10. `install` registers `@fastify/rate-limit` (draft-spec `RateLimit-*` headers,
 * no automatic per-route hook) and returns the limiter the auth hook calls, so that counting happens
 * after authentication and every answer, refusals included, carries the headers.
 */
export class RateLimits {
  constructor(
    private readonly settings: RateLimitSettings,
    private readonly counter: RateCounter,
  ) {}

  async install(app: FastifyInstance): Promise<AccessLimiter> {
    const { max, windowMs, authFailureMax } = this.settings;
    await app.register(rateLimit, {
      global: false,
      max,
      timeWindow: windowMs,
      enableDraftSpec: true,
      store: storeOf(this.counter),
      keyGenerator: (request) =>
        request.principal ? credentialKey(request.principal.credential) : `address:${request.ip}`,
      errorResponseBuilder: (_request, context) =>
        new RateLimitError(
          `at most ${context.max} requests per ${seconds(windowMs)} s; retry in ${context.after}`,
          seconds(context.ttl),
        ),
    });
    const consumeHandler = app.rateLimit();
    const counter = this.counter;
    const failureKey = (request: FastifyRequest) => `auth-failures:${request.ip}`;
    const describeFailures = (reply: FastifyReply, count: number, resetInMs: number) => {
      reply.header('ratelimit-limit', authFailureMax);
      reply.header('ratelimit-remaining', Math.max(0, authFailureMax - count));
      reply.header('ratelimit-reset', seconds(resetInMs));
    };

    return {
      admit: async (request, reply) => {
        const { count, resetInMs } = await counter.peek(failureKey(request), windowMs);
        if (count < authFailureMax) return;
        describeFailures(reply, count, resetInMs);
        throw new RateLimitError(
          'too many failed authentications from this address; retry later',
          seconds(resetInMs),
        );
      },
      recordFailure: async (request, reply) => {
        // On a refusal the headers describe the address's remaining failed-authentication budget.
        const { count, resetInMs } = await counter.increment(failureKey(request), windowMs);
        describeFailures(reply, count, resetInMs);
      },
      consume: async (request, reply) => {
        await consumeHandler.call(app, request, reply);
      },
    };
  }
}
