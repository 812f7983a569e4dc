import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { buildApp } from '../../src/app.js';
import type { ApiKeyLookup } from '../../src/auth/api-key-verifier.js';
import type { IdentityOptions } from '../../src/auth/identity.js';
import { loadConfig } from '../../src/config.js';
import { createServices, type Services } from '../../src/services.js';
import type { TestBackend } from '../helpers/backend.js';

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `probe` until it holds; fails naming `what` after `timeoutMs`. */
export async function waitUntil(what: string, probe: () => Promise<boolean>, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await probe()) return;
    await sleep(25);
  }
  throw new Error(`${what} did not happen within ${timeoutMs} ms`);
}

export interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly redis?: string;
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
export function outageWarnings(lines: readonly LogLine[], role: 'rate-limits' | 'revocations'): LogLine[] {
  return lines.filter(
    (line) => line.level === WARN && line.redis === role && line.msg.startsWith('Redis is unreachable'),
  );
}

export function recoveryLines(lines: readonly LogLine[], role: 'rate-limits' | 'revocations'): LogLine[] {
  return lines.filter((line) => line.redis === role && line.msg.startsWith('Redis is reachable again'));
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
  readonly logs: LogLine[];
  /** Storage reads of API keys made by this instance's verifier. */
  readonly lookups: { count: number };
  /** Whether this instance's optional `redis` readiness check passes now. */
  redisReady(): Promise<boolean>;
  close(): Promise<void>;
}

export interface InstanceSetup {
  readonly redisUrl: string;
  readonly env?: Record<string, string>;
  readonly identity?: Omit<IdentityOptions, 'keyLookup'>;
}

export async function startInstance(
  name: string,
  backend: TestBackend,
  setup: InstanceSetup,
): Promise<Instance> {
  const config = loadConfig({
    ...backend.env,
    PLAYBOOK_REDIS_URL: setup.redisUrl,
    PLAYBOOK_RATE_LIMIT_MAX: '100000',
    PLAYBOOK_AUTH_FAILURE_MAX: '100000',
    ...setup.env,
  });
  const { logger, lines } = capturingLogger();
  const lookups = { count: 0 };
  const services = createServices(config, logger, {
    identity: {
      ...setup.identity,
      keyLookup: (lookup: ApiKeyLookup) => ({
        find: (keyId) => {
          lookups.count++;
          return lookup.find(keyId);
        },
      }),
    },
  });
  const app = await buildApp({
    playbook: services.playbook,
    authenticator: services.authenticator,
    rateLimits: services.rateLimits,
    readiness: services.readiness,
    plugins: services.plugins,
  });
  await app.ready();
  const redisCheck = services.readiness.find((check) => check.name === 'redis');
  if (!redisCheck) throw new Error('createServices added no redis readiness check');
  return {
    name,
    services,
    app,
    logs: lines,
    lookups,
    redisReady: () =>
      redisCheck.check().then(
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
export async function storeKey(instance: Instance, accountId: string): Promise<{ id: string; key: string }> {
  const created = await instance.services.identity.keys.createFor(
    { subject: 'test-user', accounts: [accountId] },
    { name: 'multi-instance test', accountId, scopes: ['playbook:read'] },
  );
  return { id: created.id, key: created.key };
}
