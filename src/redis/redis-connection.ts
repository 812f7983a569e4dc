import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import type { Redis, RedisOptions } from 'ioredis';
import type { DependencyHealth } from '../observability/dependency-health.js';
import { type Metrics, secondsSince } from '../observability/metrics.js';

/**
 * ioredis, loaded by the first connection: a service without Redis (the embedded default) does not
 * carry its code, about 11 MB of resident memory.
 */
let ioredis: typeof import('ioredis') | undefined;
const load = createRequire(import.meta.url);

/**
 * How long one Redis command may take before its caller gives up and uses its fallback. Redis
 * answers in well under a millisecond when healthy; anything near this bound is an outage, and a
 * request must not wait longer than this on it.
 */
export const REDIS_COMMAND_TIMEOUT_MS = 500;

export interface RedisClientSettings {
  /** Shown by `CLIENT LIST`, so that an operator can tell the service's connections apart. */
  readonly connectionName: string;
  readonly commandTimeoutMs?: number;
}

/**
 * Connection options for every Redis connection of the service. Redis is an optional backend: the
 * service keeps serving without it, so no command may queue behind a dead connection.
 */
export function redisClientOptions(settings: RedisClientSettings): RedisOptions {
  return {
    connectionName: settings.connectionName,
    // A command sent while disconnected fails at once instead of waiting for a reconnect.
    enableOfflineQueue: false,
    commandTimeout: settings.commandTimeoutMs ?? REDIS_COMMAND_TIMEOUT_MS,
    maxRetriesPerRequest: 1,
    // A command that timed out has already been answered from the fallback; running it again after a
    // reconnect would count one hit twice.
    autoResendUnfulfilledCommands: false,
    connectTimeout: 2000,
    // Reconnect for as long as the process lives, at most a second apart, so that a Redis that is back
    // is noticed quickly.
    retryStrategy: (attempt: number) => Math.min(attempt * 100, 1000),
  };
}

/** A connection to `url` (`redis://` or `rediss://`), opened at once and reopened after any loss. */
export function createRedisClient(url: string, settings: RedisClientSettings): Redis {
  ioredis ??= load('ioredis') as typeof import('ioredis');
  return new ioredis.Redis(url, redisClientOptions(settings));
}

/**
 * Resolves once `redis` is ready, or once its first attempt has failed, or after `timeoutMs`,
 * whichever comes first; never rejects. Lets a short-lived command (`playbook keys revoke`) use a
 * connection it has just opened without ever waiting on a Redis that is down.
 */
export function firstConnection(redis: Redis, timeoutMs: number): Promise<void> {
  if (redis.status === 'ready' || redis.status === 'end') return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      redis.off('ready', done);
      redis.off('error', done);
      redis.off('close', done);
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    redis.once('ready', done);
    redis.once('error', done);
    redis.once('close', done);
  });
}

/** What the service uses Redis for, as `playbook_redis_duration_seconds` names it. */
export type RedisOperation = 'connect' | 'count' | 'publish' | 'subscribe' | 'ping';

/** Runs one use of Redis, timed by its outcome: `error` when it throws (a command sent while disconnected fails at once). */
export async function timedRedis<T>(
  metrics: Metrics,
  operation: RedisOperation,
  use: () => Promise<T>,
): Promise<T> {
  const started = performance.now();
  let outcome = 'error';
  try {
    const result = await use();
    outcome = 'ok';
    return result;
  } finally {
    metrics.redisDuration.observe({ operation, outcome }, secondsSince(started));
  }
}

/**
 * Times each attempt of `redis` to connect (D31): from its start to the connection being ready, or
 * to the error or close that ends it, a failed connect, so that reconnect attempts during an outage
 * count as failed uses with the time they took. A ready connection that drops is not an attempt; the
 * commands it fails are counted as theirs.
 */
export function timeConnections(redis: Redis, metrics: Metrics): void {
  let started: number | undefined;
  const ended = (outcome: 'ok' | 'error') => () => {
    if (started === undefined) return;
    metrics.redisDuration.observe({ operation: 'connect', outcome }, secondsSince(started));
    started = undefined;
  };
  // ioredis emits each status it enters as an event: `connecting` at the start of every attempt.
  redis.on('connecting', () => {
    started = performance.now();
  });
  redis.on('ready', ended('ok'));
  redis.on('error', ended('error'));
  redis.on('close', ended('error'));
}

/** Ends a connection: politely when it is up, at once otherwise. Safe to call twice. */
export async function closeRedis(redis: Redis): Promise<void> {
  if (redis.status === 'ready') {
    try {
      await redis.quit();
      return;
    } catch {
      // QUIT timed out or the connection dropped meanwhile: cut it below.
    }
  }
  redis.disconnect();
}

/**
 * Whether one use of Redis (a connection, or a subscription) works, told to the Redis dependency's
 * health (D31), which says so in the logs once per change for all of them: one warning when Redis
 * becomes unreachable, however many requests meet the outage, uses fail and reconnect attempts fail,
 * and one line when every use works again.
 */
export class RedisHealth {
  private state: 'connecting' | 'up' | 'down' | 'stopped' = 'connecting';

  /** @param role what the use is for (`rate-limits`, `revocations`), as the log line names it */
  constructor(
    private readonly dependency: DependencyHealth,
    private readonly role: string,
  ) {}

  /**
   * Follows `redis`'s connection events. Also the listener for its `error` events, which ioredis
   * would otherwise print to the console on every failed reconnect attempt.
   */
  watch(redis: Redis, options: { upOnReady?: boolean } = {}): void {
    if (options.upOnReady ?? true) redis.on('ready', () => this.up());
    redis.on('error', (error: unknown) => this.down(error));
    redis.on('close', () => this.down(new Error('connection closed')));
  }

  get isUp(): boolean {
    return this.state === 'up';
  }

  up(): void {
    if (this.state === 'up' || this.state === 'stopped') return;
    this.state = 'up';
    this.dependency.succeeded(this.role);
  }

  down(reason: unknown): void {
    if (this.state === 'down' || this.state === 'stopped') return;
    this.state = 'down';
    this.dependency.failed(reason, this.role);
  }

  /** Before an intentional close, whose events are no outage. */
  stop(): void {
    this.state = 'stopped';
  }
}
