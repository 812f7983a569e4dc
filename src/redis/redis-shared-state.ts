import type { FastifyBaseLogger } from 'fastify';
import { MemoryRateCounter, type RateCounter } from '../auth/rate-limits.js';
import type { Broadcast } from '../foundation/broadcast.js';
import { DependencyHealth } from '../observability/dependency-health.js';
import { Metrics } from '../observability/metrics.js';
import { RedisBroadcast } from './redis-broadcast.js';
import {
  closeRedis,
  createRedisClient,
  RedisHealth,
  timeConnections,
  timedRedis,
} from './redis-connection.js';
import { FallbackRateCounter, RedisRateCounter } from './redis-rate-counter.js';

/** What several instances share through Redis, ready to hand to `createIdentity` and the read path. */
export interface RedisSharedState {
  /** Revoked key ids (D8). */
  readonly revocations: Broadcast;
  /** The change log's head after a commit of any process (see changes/change-follower.ts). */
  readonly dataChanges: Broadcast;
  /** Shared counts while Redis answers, this instance's own while it does not (D10). */
  readonly rateCounter: RateCounter;
  /** Whether Redis answers every use, as they find it (D31). */
  readonly health: DependencyHealth;
  /** Throws unless Redis answers now: the optional `redis` readiness check. */
  check(): Promise<void>;
  /** Ends every connection. Safe after the broadcasts are closed, and twice. */
  close(): Promise<void>;
}

export interface RedisSharedStateOptions {
  /** Prefix of every key and channel; instances that share counts must share it. */
  readonly keyPrefix?: string;
  /** The clock of the per-instance fallback counter (the identity's clock). */
  readonly now?: () => number;
  readonly commandTimeoutMs?: number;
  /** Where the connection's state and every use of Redis are reported (D25, D31). */
  readonly metrics?: Metrics;
}

/** Key ids are short and alphanumeric (D8); a key changed otherwise than revoked is `changed:<id>`. */
const KEY_ID = /^(?:changed:)?[A-Za-z0-9]{1,64}$/;
/** Positions in the change log are counts. */
const GENERATION = /^[0-9]{1,16}$/;

/**
 * Connects to Redis for rate limits, revocations and data changes. Three connections: one for
 * commands (counts, publications, the readiness PING) and one subscribed to each channel. None ever
 * makes a request wait on a Redis that is down, and each reconnects by itself.
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
  const metrics = options.metrics ?? new Metrics();
  timeConnections(redis, metrics);
  const dependency = new DependencyHealth(
    'redis',
    logger,
    metrics,
    'rate limits are counted by each instance on its own, and revocations and writes made on other instances reach this one through the change log, within a second, until it is back',
  );
  const health = new RedisHealth(dependency, 'rate-limits');
  health.watch(redis);
  metrics.observeRedis(() => redis.status === 'ready');
  const rateCounter = new FallbackRateCounter({
    shared: new RedisRateCounter(redis, `${prefix}rl:`, metrics),
    local: new MemoryRateCounter(options.now),
    connected: () => redis.status === 'ready',
    health,
  });
  const revocations = new RedisBroadcast({
    publisher: redis,
    logger,
    channel: `${prefix}revocations`,
    accepts: KEY_ID,
    role: 'revocations',
    health: dependency,
    unannounced:
      "revocation not announced through Redis; other instances refuse the key after their keys' one-second storage re-read",
    metrics,
  });
  const dataChanges = new RedisBroadcast({
    publisher: redis,
    logger,
    channel: `${prefix}data-changes`,
    accepts: GENERATION,
    role: 'data-changes',
    health: dependency,
    unannounced:
      'data change not announced through Redis; other instances see it through their one-second database poll',
    metrics,
  });
  return {
    revocations,
    dataChanges,
    rateCounter,
    health: dependency,
    check: async () => {
      // Not even a PING on a connection known to be down: the answer is already known.
      if (redis.status !== 'ready') throw new Error(`the Redis connection is ${redis.status}`);
      if (!revocations.subscribed) throw new Error('the revocation channel is not subscribed');
      if (!dataChanges.subscribed) throw new Error('the data-change channel is not subscribed');
      await timedRedis(metrics, 'ping', () => redis.ping());
    },
    close: async () => {
      health.stop();
      await revocations.close();
      await dataChanges.close();
      await closeRedis(redis);
    },
  };
}
