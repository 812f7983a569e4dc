import type { FastifyBaseLogger } from 'fastify';
import { ChangeFollower } from '../changes/change-follower.js';
import { UnitOfWork, type UnitOfWorkOptions } from '../changes/unit-of-work.js';
import type { ContentStore } from '../content/content-store.js';
import { DirectoryContentStore } from '../content/directory-store.js';
import { observedStore } from '../content/observed-store.js';
import { S3ContentStore } from '../content/s3-store.js';
import { createDatabases, type Databases } from '../db/create-db.js';
import type { Config } from '../foundation/config.js';
import { DependencyHealth } from '../observability/dependency-health.js';
import { type Observation, unobserved } from '../observability/observation.js';
import { connectRedisSharedState, type RedisSharedState } from '../redis/redis-shared-state.js';
import { deliveryOutbox } from '../webhooks/outbox.js';
import { PendingBound, reportExceeded } from '../webhooks/pending-bound.js';

/**
 * What every command stands on: the databases, the object store, Redis when configured, the unit of
 * work every write passes through, and the follower of the change log it appends to. The commands that only write Catalog data
 * (`import`, `migrate`, `accounts`) open this much and no more; `createServices` builds the service on it.
 */
export interface Storage {
  readonly config: Config;
  readonly databases: Databases;
  /** The object store that holds `object-storage` content (a directory, or S3). */
  readonly objectStore: ContentStore;
  /** Shared state of the instances, when `PLAYBOOK_REDIS_URL` is set. */
  readonly redis: RedisSharedState | undefined;
  /** Follows the change log: what every instance's answers in memory drop, and when. */
  readonly follower: ChangeFollower;
  /** The one way a write reaches the database (see changes/unit-of-work.ts). */
  readonly writes: UnitOfWork;
  /** What is pending to each webhook endpoint, counted and bounded (D28), as every write adds to it. */
  readonly webhookBacklog: PendingBound;
  /** The service's metrics and tracing, handed to every part that records (D25). */
  readonly observation: Observation;
  /** Whether each dependency answers, as its uses find it (D31); Redis's only when configured. */
  readonly dependencies: Dependencies;
  close(): Promise<void>;
}

/** The health of each dependency of an instance (D31). */
export interface Dependencies {
  readonly database: DependencyHealth;
  readonly contentStore: DependencyHealth;
  readonly redis?: DependencyHealth;
}

export interface StorageOptions {
  /** The clock of Redis's per-instance fallback counter (the identity's clock). */
  readonly now?: () => number;
  /** How often the change log is read (tests that prove Redis alone carries a change slow it). */
  readonly changePollMs?: number;
  /** Runs in each write's transaction just before its commit (tests make a write fail there). */
  readonly beforeCommit?: UnitOfWorkOptions['beforeCommit'];
  /** The metrics to record into and the tracing to use; metrics of its own by default. */
  readonly observation?: Observation;
}

export function createObjectStore(config: Config): ContentStore & { close?(): void } {
  const store = config.contentStore;
  if (store.kind === 'directory') return new DirectoryContentStore(store.path);
  // Region and credentials come from the SDK's default chain (AWS_* variables, profiles, roles).
  return new S3ContentStore(
    store.endpoint === undefined
      ? { bucket: store.bucket, prefix: store.prefix }
      : { bucket: store.bucket, prefix: store.prefix, endpoint: store.endpoint },
  );
}

/** Opens nothing yet: database connections open on the first query; Redis's, when configured, at once. */
export function createStorage(
  config: Config,
  logger: FastifyBaseLogger,
  options: StorageOptions = {},
): Storage {
  // The one set of metrics of this process's service, and its tracing when on (D25), and the health of
  // the database and the content store, which every use of them reports to (D31).
  const observed = options.observation ?? unobserved();
  const { metrics } = observed;
  const database = new DependencyHealth(
    'database',
    logger,
    metrics,
    'answers held in memory go on being served to credentials verified before; what needs the database answers 503',
  );
  const contentStore = new DependencyHealth(
    'contentStore',
    logger,
    metrics,
    'answers held in memory and lists go on being served; content not held answers 503',
  );
  const observation: Observation = { ...observed, health: { database, contentStore } };
  const databases = createDatabases(config.database, undefined, observation);
  const objectStore = observedStore(createObjectStore(config), observation);
  // Several instances share rate limits, revocations and data changes through Redis (D8, D10).
  const redis =
    config.redisUrl === undefined
      ? undefined
      : connectRedisSharedState(config.redisUrl, logger, {
          metrics,
          ...(options.now ? { now: options.now } : {}),
        });
  // Read from the database reads go to: a change seen there comes with the data it stands for.
  const follower = new ChangeFollower(databases.reader, {
    logger,
    metrics,
    ...(redis ? { changes: redis.dataChanges } : {}),
    ...(options.changePollMs === undefined ? {} : { pollMs: options.changePollMs }),
  });
  const webhookBacklog = new PendingBound({
    max: config.webhooks.maxPendingPerEndpoint,
    onExceeded: reportExceeded(logger, metrics),
    ...(options.now ? { now: options.now } : {}),
  });
  const outbox = deliveryOutbox(webhookBacklog);
  const writes = new UnitOfWork(databases.writer, {
    logger,
    metrics,
    announce: () => follower.announce(),
    ...(options.beforeCommit ? { beforeCommit: options.beforeCommit } : {}),
    // D28: the webhook deliveries a change makes due are written with it (the outbox), and counted.
    afterAppend: [outbox.afterAppend],
    beforeCommitting: [outbox.beforeCommitting],
  });
  return {
    config,
    databases,
    objectStore,
    redis,
    follower,
    writes,
    webhookBacklog,
    observation,
    dependencies: { database, contentStore, ...(redis ? { redis: redis.health } : {}) },
    close: async () => {
      follower.stop();
      await redis?.close();
      objectStore.close?.();
      await databases.close();
    },
  };
}
