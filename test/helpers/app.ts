import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Authenticator } from '../../src/auth/authenticator.js';
import type { AccessLimiter } from '../../src/auth/rate-limits.js';
import { buildApp } from '../../src/composition/app.js';
import type { Scope } from '../../src/schemas/identity.js';
import type { TestBackend } from './backend.js';
import { createTestIdentity, type TestIdentity } from './credentials.js';
import { readSide } from './read-side.js';

/** Listens on a free port of 127.0.0.1, for tests that need a real socket; returns the base URL. */
export async function listenLocally(app: FastifyInstance): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

export interface PrincipalOptions {
  /** The caller's account; null for a caller that acts for no account (service content only). */
  readonly accountId?: string | null;
  /** The account's plan, stored on the account (D6). */
  readonly plan?: string;
  readonly scopes?: Scope[];
}

/**
 * Callers for tests of the read side that are not about authentication. Each `register` mints a real
 * credential through the identity service of the backend the registry is bound to: an API key of the
 * account with the scopes asked for, or, for a caller with no account, an access token that names
 * none (D9). The headers it returns are what a client would send.
 */
export class PrincipalRegistry {
  private identity: TestIdentity | undefined;

  /** Binds the registry to a backend; `buildTestApp` does this. */
  bind(backend: TestBackend): TestIdentity {
    this.identity = createTestIdentity(backend);
    return this.identity;
  }

  /** The authenticator of the bound identity, for tests that compose the app themselves. */
  get authenticator(): Authenticator {
    if (!this.identity) throw new Error('bind the registry to a backend first');
    return this.identity.authenticator;
  }

  async register(options: PrincipalOptions = {}): Promise<Record<string, string>> {
    const identity = this.identity;
    if (!identity)
      throw new Error('build the app with buildTestApp(backend, registry) before registering callers');
    const scopes = options.scopes ?? ['playbook:read'];
    if (options.accountId === null || options.accountId === undefined) {
      // Only an access token can act for no account, and a token reads with playbook:read (D7).
      if (scopes.length !== 1 || scopes[0] !== 'playbook:read' || (options.plan ?? 'free') !== 'free') {
        throw new Error(
          'a caller with no account reads with playbook:read on the free plan; give it an account',
        );
      }
      return identity.tokenHeaders({ accounts: [] });
    }
    const minted = await identity.mintKey({
      accountId: options.accountId,
      scopes,
      ...(options.plan === undefined ? {} : { plan: options.plan }),
    });
    return minted.headers;
  }
}

/** Rate limits that count nothing, for apps whose tests are about something else (D10 has its own). */
export const unlimited: AccessLimiter = {
  recordFailure: async () => {},
  consume: async () => {},
};

/** The service over a test backend, authenticating with real credentials (or the given authenticator). */
export async function buildTestApp(
  backend: TestBackend,
  callers: PrincipalRegistry | Authenticator,
): Promise<FastifyInstance> {
  const identity = callers instanceof PrincipalRegistry ? callers.bind(backend) : undefined;
  const reads = await readSide(backend.databases.reader, backend.content, {
    ...(backend.databases.readNow ? { readNow: backend.databases.readNow } : {}),
  });
  const app = await buildApp({
    reads: reads.answers,
    authenticator: identity ? identity.authenticator : (callers as Authenticator),
    rateLimits: identity ? identity.rateLimits : unlimited,
    readiness: [{ name: 'contentStore', check: () => backend.objectStore.check() }],
    ...(identity ? { keys: identity.keys } : {}),
  });
  app.addHook('onClose', async () => {
    reads.close();
    await identity?.close();
  });
  await app.ready();
  return app;
}
