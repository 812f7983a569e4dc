import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog } from '../helpers/fixtures.js';

/**
 * Contract §5.5, walked as an operator does it: create a new key with the same scopes, deploy it,
 * confirm requests succeed with it, then revoke the old key. A revoked key yields 401.
 */
describe('key rotation (contract §5)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let clock = Date.now();

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, { options: { now: () => clock } });
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    await givenCatalog(backend.databases.primary, { slug: 'runbooks', accountId: 'acme' });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  it('keeps the new key working while the old one is revoked', async () => {
    const authorization = `Bearer ${await identity.mintToken({ user: 'ada', accounts: ['acme'] })}`;
    const createKey = async (name: string, scopes: string[]) => {
      const response = await app.inject({
        method: 'POST',
        url: '/v3/identity/api-keys',
        headers: { authorization },
        payload: { name, accountId: 'acme', scopes },
      });
      expect(response.statusCode).toBe(201);
      return response.json() as { id: string; key: string; scopes: string[] };
    };
    const readWith = async (key: string) =>
      (await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': key } })).statusCode;

    // The integration runs with the old key.
    const old = await createKey('integration 2031-01', ['playbook:read', 'playbook:write']);
    expect(await readWith(old.key)).toBe(200);

    // 1. A new key with the same scopes, read off the list.
    const listed = await app.inject({
      url: '/v3/identity/api-keys?accountId=acme',
      headers: { authorization },
    });
    const scopes = listed.json().data.find((k: { id: string }) => k.id === old.id).scopes;
    const replacement = await createKey('integration 2031-02', scopes);
    expect(replacement.scopes).toEqual(old.scopes);

    // 2-3. Deployed and restarted: both keys are valid side by side meanwhile.
    expect(await readWith(old.key)).toBe(200);
    expect(await readWith(replacement.key)).toBe(200);

    // 4. Requests succeed with the new key: its lastUsedAt shows it.
    const check = await app.inject({
      url: '/v3/identity/api-keys?accountId=acme',
      headers: { authorization },
    });
    expect(check.json().data.find((k: { id: string }) => k.id === replacement.id).lastUsedAt).toBeDefined();

    // 5. The old key is revoked: 401 at once; the new key is unaffected, now and after revalidation.
    const revoked = await app.inject({
      method: 'DELETE',
      url: `/v3/identity/api-keys/${old.id}`,
      headers: { authorization },
    });
    expect(revoked.statusCode).toBe(204);
    expect(await readWith(old.key)).toBe(401);
    for (let i = 0; i < 3; i++) expect(await readWith(replacement.key)).toBe(200);
    clock += 5000;
    expect(await readWith(old.key)).toBe(401);
    expect(await readWith(replacement.key)).toBe(200);

    const final = await app.inject({
      url: '/v3/identity/api-keys?accountId=acme',
      headers: { authorization },
    });
    const revokedById = Object.fromEntries(
      final.json().data.map((k: { id: string; revokedAt?: string }) => [k.id, k.revokedAt !== undefined]),
    );
    expect(revokedById).toEqual({ [old.id]: true, [replacement.id]: false });
  });
});
