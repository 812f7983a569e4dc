import type { FastifyBaseLogger } from 'fastify';
import { sql } from 'kysely';
import { AuditLog } from './audit/audit-log.js';
import type { Authenticator } from './auth/authenticator.js';
import { createIdentity, type Identity, type IdentityOptions } from './auth/identity.js';
import type { RateLimits } from './auth/rate-limits.js';
import { AnswerCache } from './catalog/answer-cache.js';
import type { DataGeneration } from './catalog/data-generation.js';
import { PlaybookService } from './catalog/playbook-service.js';
import type { Config } from './config.js';
import { ContentReader } from './content/content-reader.js';
import type { ContentStore } from './content/content-store.js';
import { DatabaseContentStore } from './content/database-store.js';
import { observedStore } from './content/observed-store.js';
import type { Databases } from './db/create-db.js';
import { observeAnswerCacheSize } from './observability/metrics.js';
import { PublishService } from './publish/publish-service.js';
import type { ReadinessCheck } from './routes/operations.js';
import { createStorage } from './storage.js';

/** The long-lived parts every command shares, built once from the configuration. */
export interface Services {
  readonly config: Config;
  readonly databases: Databases;
  /** The object store that holds `object-storage` content (a directory, or S3). */
  readonly objectStore: ContentStore;
  readonly content: ContentReader;
  /** Read answers kept in memory, and the data generation that says when they are stale. */
  readonly answers: AnswerCache;
  readonly generation: DataGeneration;
  readonly playbook: PlaybookService;
  /** D23: writes of accounts' Catalogs over HTTP, on the primary database. */
  readonly publish: PublishService;
  readonly readiness: ReadinessCheck[];
  readonly authenticator: Authenticator;
  readonly rateLimits: RateLimits;
  /** API keys, access tokens and rate limits (D7-D10). */
  readonly identity: Identity;
  /** D23: the audit trail every key event and publication is appended to. */
  readonly audit: AuditLog;
  /** Lines printed when the server starts: how a newcomer gets a token and a key. */
  gettingStarted(address: string): string[];
  close(): Promise<void>;
}

export interface ServicesOptions {
  /** Identity parts a test replaces (its clock, a storage-read counter); the Redis parts follow the config. */
  readonly identity?: IdentityOptions;
  /** How often the data generation is read (tests that prove Redis alone carries a change slow it). */
  readonly dataGenerationPollMs?: number;
}

/**
 * Composes databases, content stores and services. Opens database connections lazily and Redis's (when
 * configured) at once, without waiting for them; starts no server.
 */
export function createServices(
  config: Config,
  logger: FastifyBaseLogger,
  options: ServicesOptions = {},
): Services {
  const storage = createStorage(config, logger, {
    ...(options.identity?.now ? { now: options.identity.now } : {}),
    ...(options.dataGenerationPollMs === undefined
      ? {}
      : { dataGenerationPollMs: options.dataGenerationPollMs }),
  });
  const { databases, objectStore, redis, generation } = storage;
  const content = new ContentReader(
    [observedStore(new DatabaseContentStore(databases.reader)), objectStore],
    {
      onIntegrityError: (details) =>
        logger.error(details, 'stored content does not match its hash; not served'),
    },
  );
  // SQLite's writer connection runs one statement at a time: a long write transaction would hold the
  // check, and take the instance out, though its reads go on being answered through the reader.
  const databaseCheck = databases.dialect === 'sqlite' ? databases.reader : databases.primary;
  const readiness: ReadinessCheck[] = [
    { name: 'database', check: async () => void (await sql`select 1`.execute(databaseCheck)) },
    { name: 'contentStore', check: () => objectStore.check() },
  ];
  // Reads go to the replica when one is configured: it must answer too for the service to be ready.
  if (databases.dialect === 'postgres' && databases.reader !== databases.primary) {
    readiness.push({
      name: 'readReplica',
      check: async () => void (await sql`select 1`.execute(databases.reader)),
    });
  }
  // Redis is optional: while it is down the service still serves and says so, hence an optional check.
  if (redis) readiness.push({ name: 'redis', optional: true, check: () => redis.check() });
  const answers = new AnswerCache(config.answerCacheBytes);
  generation.onChange(() => answers.clear());
  const unobserve = observeAnswerCacheSize(() => answers.stats.bytes);
  const playbook = new PlaybookService(databases.reader, content, answers);
  // D23: every key event is appended to the audit trail, before anyone else is told of it.
  const audit = new AuditLog(databases.primary);
  const identity = createIdentity(config, databases.primary, logger, {
    // SQLite's reader sees every commit at once (WAL); a PostgreSQL replica may lag a revocation.
    ...(databases.dialect === 'sqlite' ? { lookups: databases.reader } : {}),
    ...options.identity,
    keyEvents: async (event) => {
      await audit.recordKeyEvent(event);
      await options.identity?.keyEvents?.(event);
    },
    ...(redis ? { revocations: redis.revocations, rateCounter: redis.rateCounter } : {}),
  });
  const publish = new PublishService(
    { db: databases.primary, objectStore, changes: generation },
    { maxContentBytes: config.maxContentBytes },
  );
  return {
    config,
    databases,
    objectStore,
    content,
    answers,
    generation,
    playbook,
    publish,
    readiness,
    authenticator: identity.authenticator,
    rateLimits: identity.rateLimits,
    identity,
    audit,
    gettingStarted: (address) => identity.gettingStarted(address),
    close: async () => {
      unobserve();
      generation.stop();
      // Pending lastUsedAt times are written while the database is still open.
      await identity.close();
      await storage.close();
    },
  };
}
