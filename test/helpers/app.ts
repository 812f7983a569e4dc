import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import type { Authenticator } from '../../src/auth/authenticator.js';
import { DEFAULT_PLAN, type Principal, type Scope } from '../../src/auth/principal.js';
import { PlaybookService } from '../../src/catalog/playbook-service.js';
import { AuthenticationError } from '../../src/errors.js';
import type { TestBackend } from './backend.js';

/**
 * Principals by credential, for tests of the read side that are not about authentication: a test
 * registers a principal and sends its token as `x-api-key`.
 */
export class PrincipalRegistry implements Authenticator {
  private readonly principals = new Map<string, Principal>();
  private next = 0;

  register(
    options: { accountId?: string | null; plan?: string; scopes?: Scope[] } = {},
  ): Record<string, string> {
    const token = `test-credential-${++this.next}`;
    this.principals.set(token, {
      accountId: options.accountId ?? null,
      plan: options.plan ?? DEFAULT_PLAN,
      scopes: new Set(options.scopes ?? ['playbook:read']),
      credential: { kind: 'api-key', keyId: token },
    });
    return { 'x-api-key': token };
  }

  async authenticate(request: { headers: Record<string, unknown> }): Promise<Principal> {
    const principal = this.principals.get(String(request.headers['x-api-key']));
    if (!principal) throw new AuthenticationError('missing or unknown credential');
    return principal;
  }
}

export async function buildTestApp(
  backend: TestBackend,
  authenticator: Authenticator,
): Promise<FastifyInstance> {
  const app = await buildApp({
    playbook: new PlaybookService(backend.databases.reader, backend.content),
    authenticator,
    readiness: [{ name: 'contentStore', check: () => backend.objectStore.check() }],
  });
  await app.ready();
  return app;
}
