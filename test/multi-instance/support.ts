import fs from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { expect } from 'vitest';
import type { ApiKeyLookup } from '../../src/auth/api-key-verifier.js';
import type { IdentityOptions } from '../../src/auth/identity.js';
import { main } from '../../src/cli/program.js';
import { buildApp } from '../../src/composition/app.js';
import { createServices, type Services } from '../../src/composition/services.js';
import { loadConfig } from '../../src/foundation/config.js';
import { loadDeploymentKeys } from '../../src/foundation/deployment-key.js';
import type { DependencyName } from '../../src/observability/dependency-health.js';
import type { Scope } from '../../src/schemas/identity.js';
import type { TestBackend } from '../helpers/backend.js';
import { waitFor } from '../helpers/wait.js';

export interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly dependency?: string;
  readonly [field: string]: unknown;
}

/** A pino logger whose lines a test reads back. */
export function capturingLogger() {
  const lines: LogLine[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { logger, lines };
}

const WARN = 40;

/** The warnings that say Redis became unreachable, for one use of it. */
/** The lines that say `dependency` became unreachable (D31: one per outage, whatever its parts). */
export function outageWarnings(lines: readonly LogLine[], dependency: DependencyName): LogLine[] {
  return lines.filter(
    (line) =>
      line.level === WARN &&
      line.dependency === dependency &&
      line.msg.startsWith(`${dependency} is unreachable`),
  );
}

/** The lines that say `dependency` is reachable again. */
export function recoveryLines(lines: readonly LogLine[], dependency: DependencyName): LogLine[] {
  return lines.filter(
    (line) => line.dependency === dependency && line.msg.startsWith(`${dependency} is reachable again`),
  );
}

/**
 * One instance of the service as its own process would compose it (`createServices`, `buildApp`):
 * its own pools, Redis connections, verifier cache and fallback counter, over a shared database and
 * a shared Redis.
 */
export interface Instance {
  readonly name: string;
  readonly services: Services;
  readonly app: FastifyInstance;
  /** What the instance logged: its services' lines, and each request's access line and errors. */
  readonly logs: LogLine[];
  /** Storage reads of API keys made by this instance's verifier. */
  readonly lookups: { count: number };
  /** Whether this instance's optional `redis` readiness check passes now. */
  redisReady(): Promise<boolean>;
  close(): Promise<void>;
}

export interface InstanceSetup {
  /** Without one, the instance shares nothing but the database (the embedded default, or no Redis). */
  readonly redisUrl?: string;
  readonly env?: Record<string, string>;
  readonly identity?: Omit<IdentityOptions, 'keyLookup'>;
  readonly changePollMs?: number;
}

export async function startInstance(
  name: string,
  backend: TestBackend,
  setup: InstanceSetup,
): Promise<Instance> {
  const config = loadConfig({
    ...backend.env,
    ...(setup.redisUrl === undefined ? {} : { PLAYBOOK_REDIS_URL: setup.redisUrl }),
    PLAYBOOK_RATE_LIMIT_MAX: '100000',
    PLAYBOOK_AUTH_FAILURE_MAX: '100000',
    ...setup.env,
  });
  const { logger, lines } = capturingLogger();
  const lookups = { count: 0 };
  // As `playbook serve` loads them: instances on one database share the deployment's key (D27).
  const deploymentKeys = await loadDeploymentKeys({
    dataDir: config.dataDir,
    databaseKind: config.database.kind,
    ...(config.deploymentKeys ? { keys: config.deploymentKeys } : {}),
  });
  const services = createServices(config, logger, {
    deploymentKeys,
    identity: {
      ...setup.identity,
      keyLookup: (lookup: ApiKeyLookup) => ({
        find: (keyId) => {
          lookups.count++;
          return lookup.find(keyId);
        },
      }),
    },
    ...(setup.changePollMs === undefined ? {} : { changePollMs: setup.changePollMs }),
  });
  // As `playbook serve` does before it listens.
  await services.follower.start();
  const app = await buildApp({
    reads: services.reads,
    authenticator: services.authenticator,
    rateLimits: services.rateLimits,
    usage: services.identity.usage,
    readiness: services.readiness,
    servesFromMemory: () => services.servesFromMemory(),
    keys: services.identity.keys,
    ...(services.sync ? { sync: services.sync } : {}),
    publish: {
      service: services.publish,
      maxBodyBytes: config.maxPublishBytes,
      maxResources: config.maxPublishResources,
    },
    // As `serve` does: the access line of each request and any error it meets are the instance's lines too.
    logger,
  });
  await app.ready();
  const redisCheck = services.readiness.find((check) => check.name === 'redis');
  if (setup.redisUrl !== undefined && !redisCheck)
    throw new Error('createServices added no redis readiness check');
  return {
    name,
    services,
    app,
    logs: lines,
    lookups,
    redisReady: async () =>
      redisCheck === undefined
        ? false
        : redisCheck.check().then(
            () => true,
            () => false,
          ),
    close: async () => {
      await app.close();
      await services.close();
    },
  };
}

/** A bearer token for `user`, signed by the instance's embedded signer (shared through the data dir). */
export async function bearer(instance: Instance, user: string, accounts: string[]): Promise<string> {
  const signer = instance.services.identity.signer;
  if (!signer) throw new Error('the test instances use the embedded signer');
  return `Bearer ${await signer.mint({ subject: user, accounts, ttlSeconds: 3600 })}`;
}

/** An API key stored through the instance's key service (no request, so no rate limit is touched). */
export async function storeKey(
  instance: Instance,
  accountId: string,
  scopes: Scope[] = ['playbook:read'],
): Promise<{ id: string; key: string }> {
  const created = await instance.services.identity.keys.createFor(
    { subject: 'test-user', accounts: [accountId] },
    { name: 'multi-instance test', accountId, scopes },
  );
  return { id: created.id, key: created.key };
}

const CATALOGS = '/v3/playbook/catalogs';
/** How soon a change must show on every instance. */
export const WITHIN_MS = 1000;

class Discard extends Writable {
  override _write(_chunk: Buffer, _encoding: string, done: () => void): void {
    done();
  }
}

/** Imports, reads and clocks for the tests of data changes, over one backend. */
export function dataChanges(backend: () => TestBackend) {
  let imported = 0;

  /** `playbook import` of one more catalog, as another process would run it; resolves once committed. */
  async function importCatalog(slug: string, env: Record<string, string> = {}): Promise<void> {
    const tree = path.join(backend().workDir, 'tree');
    const folder = path.join(tree, slug);
    await fs.mkdir(path.join(folder, 'resources'), { recursive: true });
    await fs.writeFile(path.join(folder, 'catalog.json'), JSON.stringify({ name: slug, version: '1' }));
    await fs.writeFile(
      path.join(folder, 'resources', 'doc.json'),
      JSON.stringify({
        kind: 'document',
        title: 'Doc',
        version: '1',
        mediaType: 'text/plain',
        content: slug,
      }),
    );
    const code = await main(
      ['node', 'playbook', 'import', tree, '--owner', 'svc'],
      { ...backend().env, ...env },
      {
        stdout: new Discard(),
        stderr: new Discard(),
      },
    );
    expect(code).toBe(0);
    imported++;
  }

  async function slugs(instance: Instance): Promise<string[]> {
    const res = await instance.app.inject({
      url: CATALOGS,
      headers: { authorization: await bearer(instance, 'reader', []) },
    });
    expect(res.statusCode).toBe(200);
    return res.json().data.map((catalog: { slug: string }) => catalog.slug);
  }

  /** Reads until `slug` shows on `instance`; returns how long that took after the import committed. */
  async function shownAfter(instance: Instance, slug: string, committedAt: number): Promise<number> {
    await waitFor(`${slug} on ${instance.name}`, async () => (await slugs(instance)).includes(slug), 5000);
    return performance.now() - committedAt;
  }

  /** Both instances hold the list in memory: a second read is a hit. */
  async function warm(instances: readonly Instance[]): Promise<void> {
    for (const instance of instances) {
      await slugs(instance);
      const hits = instance.services.answers.stats.hits;
      expect(await slugs(instance)).toHaveLength(imported);
      expect(instance.services.answers.stats.hits).toBeGreaterThan(hits);
    }
  }

  return { importCatalog, shownAfter, warm };
}
