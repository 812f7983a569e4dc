import type { FastifyBaseLogger } from 'fastify';
import { MemoryRateCounter, type RateCounter } from './rate-limits.js';
import { closeRedis, createRedisClient, RedisHealth } from './redis-connection.js';
import { FallbackRateCounter, RedisRateCounter } from './redis-rate-counter.js';
import { RedisRevocationBus } from './redis-revocation-bus.js';
import type { RevocationBus } from './revocation-bus.js';

/** What several instances share through Redis (D8, D10), ready to hand to `createIdentity`. */
export interface RedisSharedState {
  readonly revocations: RevocationBus;
  /** Shared counts while Redis answers, this instance's own while it does not. */
  readonly rateCounter: RateCounter;
  /** Throws unless Redis answers now: the optional `redis` readiness check. */
  check(): Promise<void>;
  /** Ends both connections. Safe after `revocations.close()`, and twice. */
  close(): Promise<void>;
}

export interface RedisSharedStateOptions {
  /** Prefix of every key and channel; instances that share counts must share it. */
  readonly keyPrefix?: string;
  /** The clock of the per-instance fallback counter (the identity's clock). */
  readonly now?: () => number;
  readonly commandTimeoutMs?: number;
}

/**
 * Connects to Redis for rate limits and revocations. Two connections: one for commands (counts,
 * publications, the readiness PING), one subscribed to the revocation channel. Neither ever makes a
 * request wait on a Redis that is down, and both reconnect by themselves.
 *
 * @example
 * const redis = connectRedisSharedState(config.redisUrl, logger);
 * const identity = createIdentity(config, db, logger, {
 *   revocations: redis.revocations,
 *   rateCounter: redis.rateCounter,
 * });
 */
export function connectRedisSharedState(
  url: string,
  logger: FastifyBaseLogger,
  options: RedisSharedStateOptions = {},
): RedisSharedState {
  const prefix = options.keyPrefix ?? 'playbook:';
  const redis = createRedisClient(url, {
    connectionName: 'playbook-commands',
    ...(options.commandTimeoutMs === undefined ? {} : { commandTimeoutMs: options.commandTimeoutMs }),
  });
  const health = new RedisHealth(logger, {
    role: 'rate-limits',
    whileDown: 'rate limits are counted by each instance on its own until it is back',
    whileUp: 'rate limits are counted once for all instances',
  });
  health.watch(redis);
  const rateCounter = new FallbackRateCounter({
    shared: new RedisRateCounter(redis, `${prefix}rl:`),
    local: new MemoryRateCounter(options.now),
    connected: () => redis.status === 'ready',
    health,
  });
  const revocations = new RedisRevocationBus({ publisher: redis, logger, channel: `${prefix}revocations` });
  return {
    revocations,
    rateCounter,
    check: async () => {
      // Not even a PING on a connection known to be down: the answer is already known.
      if (redis.status !== 'ready') throw new Error(`the Redis connection is ${redis.status}`);
      if (!revocations.subscribed) throw new Error('the revocation channel is not subscribed');
      await redis.ping();
    },
    close: async () => {
      health.stop();
      await revocations.close();
      await closeRedis(redis);
    },
  };
}
