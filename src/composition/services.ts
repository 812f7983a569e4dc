import type { FastifyBaseLogger } from 'fastify';
import { sql } from 'kysely';
import { type AccountDirectory, describeAccounts } from '../accounts/accounts.js';
import { AnswerCache } from '../answers/answer-cache.js';
import { ReadAnswers } from '../answers/read-answers.js';
import { AuditLog } from '../audit/audit-log.js';
import type { Authenticator } from '../auth/authenticator.js';
import { createIdentity, type Identity, type IdentityOptions } from '../auth/identity.js';
import type { CredentialCheck } from '../auth/principal.js';
import type { RateLimits } from '../auth/rate-limits.js';
import { PlaybookService } from '../catalog/playbook-service.js';
import { compileDetailSerializer, StoredDetailsBuilder } from '../catalog/stored-details.js';
import type { ChangeFollower } from '../changes/change-follower.js';
import { MemoryTrust } from '../changes/memory-trust.js';
import type { UnitOfWork } from '../changes/unit-of-work.js';
import { ContentReader } from '../content/content-reader.js';
import type { ContentStore } from '../content/content-store.js';
import { DatabaseContentStore } from '../content/database-store.js';
import { observedStore } from '../content/observed-store.js';
import type { Databases } from '../db/create-db.js';
import type { Config } from '../foundation/config.js';
import { type DeploymentKeys, loadDeploymentKeys } from '../foundation/deployment-key.js';
import type { Metrics } from '../observability/metrics.js';
import type { Observation } from '../observability/observation.js';
import { PublishService } from '../publish/publish-service.js';
import type { ReadinessCheck } from '../routes/operations.js';
import { HeldRequests } from '../sync/held-requests.js';
import { SyncFeed } from '../sync/sync-feed.js';
import { SyncTokens } from '../sync/sync-tokens.js';
import { WebhookDispatcher } from '../webhooks/dispatcher.js';
import { WebhookEndpoints } from '../webhooks/webhook-endpoints.js';
import { createStorage, type Dependencies, type StorageOptions } from './storage.js';

/** The long-lived parts every command shares, built once from the configuration. */
export interface Services {
  readonly config: Config;
  readonly databases: Databases;
  /** The object store that holds `object-storage` content (a directory, or S3). */
  readonly objectStore: ContentStore;
  readonly content: ContentReader;
  /** Read answers kept in memory, and the follower of the change log that says which are stale. */
  readonly answers: AnswerCache;
  readonly follower: ChangeFollower;
  /** The one way a write reaches the database (see changes/unit-of-work.ts). */
  readonly writes: UnitOfWork;
  /** The service's metrics (D25): what `/metrics` serves, recorded into by every part above. */
  readonly metrics: Metrics;
  /** The metrics and tracing together, as storage calls take them. */
  readonly observation: Observation;
  /** The read side: what the read operations see, as domain values. */
  readonly playbook: PlaybookService;
  /** The read operations' answers: the read side's values serialized and kept in `answers`. */
  readonly reads: ReadAnswers;
  /** The read model of details (D30): writes its rows once started. */
  readonly storedDetails: StoredDetailsBuilder;
  /** D23: writes of accounts' Catalogs over HTTP, on the primary database. */
  readonly publish: PublishService;
  readonly readiness: ReadinessCheck[];
  /** D31: whether the instance holds answers to serve while a required dependency is down. */
  servesFromMemory(): boolean;
  /** D31: whether each dependency answers, as its uses find it. */
  readonly dependencies: Dependencies;
  readonly authenticator: Authenticator;
  readonly rateLimits: RateLimits;
  /** API keys, access tokens and rate limits (D7-D10). */
  readonly identity: Identity;
  /** D23: the audit list, read from the change log. */
  readonly audit: AuditLog;
  /** D33: accounts as their users see them (`GET /v3/identity/me`). */
  readonly accounts: AccountDirectory;
  /**
   * D27: the sync feed and the requests it holds, when the deployment's keys were given (they seal its
   * positions); a command that serves nothing needs neither.
   */
  readonly sync: { readonly feed: SyncFeed; readonly held: HeldRequests } | undefined;
  /**
   * The deployment's keys (D27, D28), loaded once, on first use: the configured ones, or on SQLite the
   * data directory's key file. Rejects (a `ConfigError`) on PostgreSQL without a configured key.
   */
  deploymentKeys(): Promise<DeploymentKeys>;
  /** D28: an account's webhook endpoints. */
  readonly webhooks: WebhookEndpoints;
  /** D28: makes the deliveries that changes made due; `serve` starts it, `close` stops it. */
  readonly webhookDispatcher: WebhookDispatcher;
  /** Lines printed when the server starts: how a newcomer gets a token and a key. */
  gettingStarted(address: string): string[];
  close(): Promise<void>;
}

export interface ServicesOptions {
  /** Identity parts a test replaces (its clock, a storage-read counter); the Redis parts follow the config. */
  readonly identity?: IdentityOptions;
  /** How often the change log is read (tests that prove Redis alone carries a change slow it). */
  readonly changePollMs?: number;
  /** Runs in each write's transaction just before its commit (tests make a write fail there). */
  readonly beforeCommit?: StorageOptions['beforeCommit'];
  /** The metrics to record into and the tracing to use (the server's); metrics of its own by default. */
  readonly observation?: Observation;
  /** D27: the deployment's keys (loaded once, by the command that serves), which seal sync positions. */
  readonly deploymentKeys?: DeploymentKeys;
  /** Name resolution of webhook endpoints' hosts (tests give names their own answers). */
  readonly resolveWebhookHosts?: WebhookDispatcherResolve;
  /** How often the webhook dispatcher looks for deliveries that fell due with time. */
  readonly webhookPollMs?: number;
}

type WebhookDispatcherResolve = NonNullable<ConstructorParameters<typeof WebhookDispatcher>[0]['resolve']>;

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
    ...(options.changePollMs === undefined ? {} : { changePollMs: options.changePollMs }),
    ...(options.beforeCommit ? { beforeCommit: options.beforeCommit } : {}),
    ...(options.observation ? { observation: options.observation } : {}),
  });
  const { databases, objectStore, redis, follower, writes, webhookBacklog, observation, dependencies } =
    storage;
  // D31: memory is served while the change log is followed, and through a database outage; once the
  // database answers again, the log is read at once, before memory is trusted again.
  const trust = new MemoryTrust({ follower, database: dependencies.database });
  const unwatchDatabase = dependencies.database.onChange((up) => {
    if (up) void follower.check();
  });
  const { metrics } = observation;
  const content = new ContentReader(
    // Content kept in the database is timed like any other, but its reads say nothing of the object
    // store's health (the database's own uses report the database's).
    [
      observedStore(new DatabaseContentStore(databases.reader), { ...observation, health: undefined }),
      objectStore,
    ],
    {
      onIntegrityError: (details) =>
        logger.error(details, 'stored content does not match its hash; not served'),
    },
  );
  // SQLite's writer connection runs one statement at a time: a long write transaction would hold the
  // check, and take the instance out, though its reads go on being answered through the reader.
  const databaseCheck = databases.dialect === 'sqlite' ? databases.reader : databases.primary;
  const readiness: ReadinessCheck[] = [
    {
      name: 'database',
      essential: true,
      check: async () => void (await sql`select 1`.execute(databaseCheck)),
    },
    { name: 'contentStore', check: () => objectStore.check() },
  ];
  // Reads go to the replica when one is configured: it must answer too for the service to be ready.
  if (databases.dialect === 'postgres' && databases.reader !== databases.primary) {
    readiness.push({
      name: 'readReplica',
      essential: true,
      check: async () => void (await sql`select 1`.execute(databases.reader)),
    });
  }
  // Redis is optional: while it is down the service still serves and says so, hence an optional check.
  if (redis) readiness.push({ name: 'redis', optional: true, check: () => redis.check() });
  const answers = new AnswerCache(config.answerCacheBytes, metrics, trust);
  follower.onChange((followed) => answers.follow(followed));
  const unobserve = metrics.observeAnswerCacheSize(() => answers.stats.bytes);
  const playbook = new PlaybookService(databases.reader, content, databases.readNow);
  // D30: the read model of details, written by the service; `serve` starts it once listening.
  // Built from the primary on PostgreSQL: a replica set behind one address may read the log's head
  // from one standby and a Resource from another, further behind.
  const buildFrom = databases.dialect === 'postgres' ? databases.primary : databases.reader;
  const builderReads = buildFrom === databases.reader ? playbook : new PlaybookService(buildFrom, content);
  const storedDetails = new StoredDetailsBuilder(
    buildFrom,
    writes,
    (resourceId) => builderReads.ownerDetail(resourceId),
    compileDetailSerializer(),
    { logger },
  );
  const reads = new ReadAnswers(playbook, answers, (resourceId) => storedDetails.request(resourceId));
  const audit = new AuditLog(databases.primary);
  const identity = createIdentity(config, databases.primary, logger, {
    // SQLite's reader sees every commit at once (WAL); a PostgreSQL replica may lag a revocation.
    ...(databases.dialect === 'sqlite' ? { lookups: databases.reader } : {}),
    ...options.identity,
    writes,
    trust,
    ...(redis ? { revocations: redis.revocations, rateCounter: redis.rateCounter } : {}),
  });
  follower.onChange((followed) => identity.verifier.follow(followed));
  let keys: Promise<DeploymentKeys> | undefined;
  const deploymentKeys = () => {
    keys ??= options.deploymentKeys
      ? Promise.resolve(options.deploymentKeys)
      : loadDeploymentKeys({
          dataDir: config.dataDir,
          databaseKind: config.database.kind,
          ...(config.deploymentKeys === undefined ? {} : { keys: config.deploymentKeys }),
        });
    return keys;
  };
  // D28: deliveries are looked for when a change commits anywhere, as the follower learns of it.
  const webhooks = new WebhookEndpoints(databases.primary, {
    writes,
    keys: deploymentKeys,
    urls: config.webhooks,
    ...(options.identity?.now ? { now: options.identity.now } : {}),
    onDue: () => webhookDispatcher.wake(),
    pending: webhookBacklog,
  });
  const webhookDispatcher = new WebhookDispatcher({
    db: databases.primary,
    // SQLite's reader is never held by a write: looking for what is due does not wait for one.
    ...(databases.dialect === 'sqlite' ? { probe: databases.reader } : {}),
    keys: deploymentKeys,
    endpoints: webhooks,
    config: config.webhooks,
    metrics,
    tracing: observation.tracing,
    logger,
    ...(options.identity?.now ? { now: options.identity.now } : {}),
    ...(options.resolveWebhookHosts ? { resolve: options.resolveWebhookHosts } : {}),
    ...(options.webhookPollMs === undefined ? {} : { pollMs: options.webhookPollMs }),
  });
  follower.onChange(() => webhookDispatcher.wake());
  const sync = options.deploymentKeys
    ? syncFeedOf(config, options.deploymentKeys, databases, follower, metrics, identity.authenticator)
    : undefined;
  const publish = new PublishService(
    { db: databases.primary, objectStore, writes, metrics },
    { maxContentBytes: config.maxContentBytes },
  );
  return {
    config,
    databases,
    objectStore,
    content,
    answers,
    follower,
    writes,
    metrics,
    observation,
    playbook,
    reads,
    storedDetails,
    publish,
    readiness,
    servesFromMemory: () => answers.stats.entries > 0 && trust.trusted,
    dependencies,
    authenticator: identity.authenticator,
    rateLimits: identity.rateLimits,
    identity,
    audit,
    accounts: (ids) => describeAccounts(databases.primary, ids),
    sync,
    deploymentKeys,
    webhooks,
    webhookDispatcher,
    gettingStarted: (address) => identity.gettingStarted(address),
    close: async () => {
      sync?.held.close();
      await webhookDispatcher.stop();
      storedDetails.stop();
      await storedDetails.settled();
      unobserve();
      unwatchDatabase();
      trust.close();
      follower.stop();
      // Pending lastUsedAt times are written while the database is still open.
      await identity.close();
      await storage.close();
    },
  };
}

/**
 * D27: the sync feed over the database reads go to, following the log its follower reads; a held
 * request's credential is checked again by the authenticator that admitted it, whose verifier follows
 * the same log (registered above, so it hears of a revocation before the requests it wakes).
 */
function syncFeedOf(
  config: Config,
  keys: DeploymentKeys,
  databases: Databases,
  follower: ChangeFollower,
  metrics: Metrics,
  credentials: CredentialCheck,
): { feed: SyncFeed; held: HeldRequests } {
  const held = new HeldRequests(follower, {
    maxHeld: config.syncMaxWaiters,
    maxPerCredential: config.syncMaxWaitersPerKey,
    metrics,
  });
  metrics.observeHeldRequests(() => held.count);
  const feed = new SyncFeed(databases.reader, new SyncTokens(keys), {
    retentionS: config.syncRetentionS,
    metrics,
    waits: held,
    credentials,
  });
  return { feed, held };
}
