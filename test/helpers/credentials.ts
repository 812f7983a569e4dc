import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import pino from 'pino';
import { describeAccounts, setAccount } from '../../src/accounts/accounts.js';
import { AuditLog } from '../../src/audit/audit-log.js';
import { createIdentity, type Identity, type IdentityOptions } from '../../src/auth/identity.js';
import { UnitOfWork, type UnitOfWorkOptions } from '../../src/changes/unit-of-work.js';
import { buildApp } from '../../src/composition/app.js';
import type { ContentStore } from '../../src/content/content-store.js';
import { type Config, loadConfig } from '../../src/foundation/config.js';
import { loadDeploymentKeys } from '../../src/foundation/deployment-key.js';
import { Metrics } from '../../src/observability/metrics.js';
import type { Tracing } from '../../src/observability/tracing.js';
import { PublishService } from '../../src/publish/publish-service.js';
import type { KeyRestrictionsInput, Scope } from '../../src/schemas/identity.js';
import { PendingBound } from '../../src/webhooks/pending-bound.js';
import { WebhookEndpoints } from '../../src/webhooks/webhook-endpoints.js';
import type { TestBackend } from './backend.js';
import { followNow, type ReadSide, readSide } from './read-side.js';
import { type SyncParts, type SyncSetup, syncParts } from './sync.js';

/**
 * Real credentials for tests: API keys minted and stored exactly as the service does, and access
 * tokens signed by the embedded dev signer in the backend's work directory.
 *
 * @example
 * const identity = createTestIdentity(backend);
 * const app = await buildTestApp(backend, identity.authenticator); // or buildIdentityApp(backend, identity)
 * const { headers } = await identity.mintKey({ accountId: 'acme', plan: 'pro' });
 * await app.inject({ url: '/v3/playbook/catalogs', headers });
 */
export interface TestIdentity extends Identity {
  readonly config: Config;
  /** The audit list, read from the change log (D23). */
  readonly audit: AuditLog;
  /** The unit of work its key events and the app's publications go through. */
  readonly writes: UnitOfWork;
  /** The metrics its writes, and the apps built with it, record into (D25). */
  readonly metrics: Metrics;
  /** Stores a key for the account (created, or its plan set, when `plan` is given). */
  mintKey(options: MintKeyOptions): Promise<MintedKey>;
  /** Signs a token for `user` (default `test-user`) acting for `accounts`; sets their plan when given. */
  mintToken(options?: MintTokenOptions): Promise<string>;
  /** `Authorization: Bearer …` headers for a fresh token. */
  tokenHeaders(options?: MintTokenOptions): Promise<Record<string, string>>;
}

export interface MintKeyOptions {
  readonly accountId: string;
  readonly scopes?: Scope[];
  readonly plan?: string;
  readonly name?: string;
  readonly expiresAt?: string;
  /** D32: what the key is limited to. */
  readonly restrictions?: KeyRestrictionsInput;
}

export interface MintedKey {
  readonly id: string;
  readonly key: string;
  readonly headers: { 'x-api-key': string };
}

export interface MintTokenOptions {
  readonly user?: string;
  readonly accounts?: string[];
  readonly plan?: string;
  readonly ttlSeconds?: number;
  /** Seconds since the epoch. */
  readonly issuedAt?: number;
}

export interface TestIdentitySetup {
  /** Configuration variables on top of the test defaults (data directory, generous rate limits). */
  readonly env?: Record<string, string>;
  readonly options?: IdentityOptions;
  readonly logger?: FastifyBaseLogger;
  /** Runs in each write's transaction just before its commit (where a test makes one fail). */
  readonly beforeCommit?: UnitOfWorkOptions['beforeCommit'];
  /** The metrics to record into; metrics of its own by default. */
  readonly metrics?: Metrics;
}

export function testConfig(backend: TestBackend, env: Record<string, string> = {}): Config {
  return loadConfig({
    ...backend.env,
    PLAYBOOK_RATE_LIMIT_MAX: '100000',
    PLAYBOOK_AUTH_FAILURE_MAX: '100000',
    ...env,
  });
}

export function createTestIdentity(backend: TestBackend, setup: TestIdentitySetup = {}): TestIdentity {
  const config = testConfig(backend, setup.env);
  const db = backend.databases.primary;
  const audit = new AuditLog(db);
  // As the service composes it (storage.ts): a commit is announced to every read side of the process.
  const metrics = setup.metrics ?? new Metrics();
  const writes = new UnitOfWork(backend.databases.writer, {
    metrics,
    announce: followNow,
    ...(setup.beforeCommit ? { beforeCommit: setup.beforeCommit } : {}),
  });
  const identity = createIdentity(config, db, setup.logger ?? pino({ level: 'silent' }), {
    // Usage times are written when a test flushes or closes, never by a timer in the middle of a test
    // that compares what storage holds before and after a refused write.
    usageFlushIntervalMs: 3_600_000,
    ...setup.options,
    writes,
  });
  const mintToken = async (options: MintTokenOptions = {}) => {
    if (!identity.signer) throw new Error('mintToken needs the embedded signer (no PLAYBOOK_JWKS_URL)');
    const accounts = options.accounts ?? [];
    if (options.plan !== undefined) {
      for (const accountId of accounts) await setAccount(writes, accountId, { plan: options.plan });
    }
    return identity.signer.mint({
      subject: options.user ?? 'test-user',
      accounts,
      ttlSeconds: options.ttlSeconds ?? 3600,
      // Signed on the identity's own clock, so that a test that moves it gets tokens valid at its time.
      issuedAt: options.issuedAt ?? Math.floor((setup.options?.now ?? Date.now)() / 1000),
    });
  };
  return {
    ...identity,
    audit,
    writes,
    metrics,
    config,
    mintKey: async (options) => {
      if (options.plan !== undefined) await setAccount(writes, options.accountId, { plan: options.plan });
      const created = await identity.keys.createFor(
        { subject: 'test-user', accounts: [options.accountId] },
        {
          name: options.name ?? 'test key',
          accountId: options.accountId,
          scopes: options.scopes ?? ['playbook:read'],
          ...(options.expiresAt === undefined ? {} : { expiresAt: options.expiresAt }),
          ...(options.restrictions === undefined ? {} : { restrictions: options.restrictions }),
        },
      );
      return { id: created.id, key: created.key, headers: { 'x-api-key': created.key } };
    },
    mintToken,
    tokenHeaders: async (options) => ({ authorization: `Bearer ${await mintToken(options)}` }),
  };
}

/** The whole service over a test backend: reads, key management and rate limits. */
export async function buildIdentityApp(
  backend: TestBackend,
  identity: TestIdentity,
  logger?: FastifyBaseLogger,
  /**
   * Parts a test replaces: the object store publishing writes to (to make it fail half-way); the sync
   * feed's clock and cap, and where its parts are handed back.
   */
  overrides: {
    readonly objectStore?: ContentStore;
    readonly tracing?: Tracing;
    /** The read path, for a test that looks at the answers it holds. */
    readonly reads?: ReadSide;
    readonly sync?: SyncSetup & { readonly built?: (parts: SyncParts) => void };
  } = {},
): Promise<FastifyInstance> {
  const reads =
    overrides.reads ??
    (await readSide(backend.databases.reader, backend.content, { metrics: identity.metrics }));
  const config = identity.config;
  const publish = new PublishService(
    {
      db: backend.databases.primary,
      objectStore: overrides.objectStore ?? backend.objectStore,
      writes: identity.writes,
      metrics: identity.metrics,
    },
    { maxContentBytes: config.maxContentBytes },
  );
  const sync = await syncParts(
    config,
    backend.databases.reader,
    reads.follower,
    identity.metrics,
    identity.authenticator,
    overrides.sync,
  );
  overrides.sync?.built?.(sync);
  const app = await buildApp({
    metrics: identity.metrics,
    reads: reads.answers,
    sync,
    authenticator: identity.authenticator,
    rateLimits: identity.rateLimits,
    usage: identity.usage,
    readiness: [],
    keys: identity.keys,
    audit: identity.audit,
    accounts: (ids) => describeAccounts(backend.databases.primary, ids),
    ...(identity.devSignIn ? { devSignIn: identity.devSignIn } : {}),
    webhooks: new WebhookEndpoints(backend.databases.primary, {
      writes: identity.writes,
      keys: () =>
        loadDeploymentKeys({
          dataDir: config.dataDir,
          databaseKind: config.database.kind,
          ...(config.deploymentKeys === undefined ? {} : { keys: config.deploymentKeys }),
        }),
      urls: config.webhooks,
      pending: new PendingBound({ max: config.webhooks.maxPendingPerEndpoint }),
    }),
    publish: {
      service: publish,
      maxBodyBytes: config.maxPublishBytes,
      maxResources: config.maxPublishResources,
    },
    ...(overrides.tracing ? { tracing: overrides.tracing } : {}),
    ...(identity.leakSignatures ? { leakSignatures: identity.leakSignatures } : {}),
    ...(logger ? { logger } : {}),
    timeouts: config.timeouts,
    trustProxy: config.trustProxy,
  });
  app.addHook('onClose', async () => {
    sync.held.close();
    reads.close();
  });
  await app.ready();
  return app;
}
