import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { composeApiKey, generateApiKey, parseApiKey } from '../../src/schemas/api-key-format.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';
import { liveEnv } from '../helpers/jwks.js';

describe('reads with an API key (contract §5, §7; D7, D8)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let clock = Date.now();
  let acmeResource: { id: string; currentVersionId: string };

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, { options: { now: () => clock } });
    app = await buildIdentityApp(backend, identity);
    const db = backend.databases.primary;
    await givenAccount(db, 'acme');
    await givenAccount(db, 'globex');
    const svc = await givenCatalog(db, { slug: 'handbook' });
    await givenResource(backend, svc, { slug: 'onboarding' });
    const acme = await givenCatalog(db, { slug: 'internal', accountId: 'acme' });
    acmeResource = await givenResource(backend, acme, { slug: 'secret-plans' });
    await givenCatalog(db, { slug: 'internal', accountId: 'globex' });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const read = (headers: Record<string, string>, url = '/v3/playbook/catalogs') =>
    app.inject({ url, headers });

  function expectUnauthenticated(response: Awaited<ReturnType<typeof read>>) {
    expect(response.statusCode).toBe(401);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.json()).toMatchObject({ status: 401, code: 'unauthenticated' });
  }

  it('serves a valid key with playbook:read, with its account visible', async () => {
    const { headers } = await identity.mintKey({ accountId: 'acme' });
    const response = await read(headers);
    expect(response.statusCode).toBe(200);
    expect(response.json().data.map((c: { humanRef: string }) => c.humanRef)).toEqual([
      'svc/handbook',
      'org/internal',
    ]);
  });

  it('401: no credential at all', async () => {
    expectUnauthenticated(await read({}));
  });

  it.each([
    ['empty', ''],
    ['garbage', 'hello'],
    ['a token-looking value', 'eyJhbGciOiJIUzI1NiJ9.e30.x'],
    ['wrong prefix', 'sk_live_0123456789abcdef_0123456789abcdef0123456789abcdef012'],
  ])('401: a malformed key (%s)', async (_label, value) => {
    expectUnauthenticated(await read({ 'x-api-key': value }));
  });

  it('401: a bad checksum', async () => {
    const { key } = await identity.mintKey({ accountId: 'acme' });
    const typo = key.slice(0, -2) + (key.at(-2) === 'Q' ? 'R' : 'Q') + key.at(-1);
    const response = await read({ 'x-api-key': typo });
    expectUnauthenticated(response);
    expect(response.json().detail).toBe('the API key is malformed');
  });

  it('401: an unknown key id and a wrong secret, answered alike', async () => {
    const { key } = await identity.mintKey({ accountId: 'acme' });
    const random = generateApiKey('test').secret.slice(0, 33);
    const unknown = await read({ 'x-api-key': composeApiKey('test', 'NoSuchKey0000000', random) });
    const wrong = await read({ 'x-api-key': composeApiKey('test', parseApiKey(key)!.keyId, random) });
    expectUnauthenticated(unknown);
    expectUnauthenticated(wrong);
    expect(unknown.json().detail).toBe(wrong.json().detail);
  });

  it('401: a key of the other environment', async () => {
    const live = createTestIdentity(backend, { env: liveEnv() });
    const { key } = await live.mintKey({ accountId: 'acme' });
    await live.close();
    expect(key.startsWith('svc_sk_live_')).toBe(true);
    const response = await read({ 'x-api-key': key });
    expectUnauthenticated(response);
    expect(response.json().detail).toBe('this deployment accepts only test API keys');
  });

  it('401: a revoked key', async () => {
    const { headers, id } = await identity.mintKey({ accountId: 'acme' });
    expect((await read(headers)).statusCode).toBe(200);
    await identity.keys.revoke(id);
    const response = await read(headers);
    expectUnauthenticated(response);
    expect(response.json().detail).toBe('the API key has been revoked');
  });

  it('401: an expired key', async () => {
    const { headers } = await identity.mintKey({
      accountId: 'acme',
      expiresAt: new Date(clock + 3_600_000).toISOString(),
    });
    expect((await read(headers)).statusCode).toBe(200);
    clock += 3_600_000;
    const response = await read(headers);
    expectUnauthenticated(response);
    expect(response.json().detail).toBe('the API key has expired');
  });

  it('403: a valid key without playbook:read (write-only keys exist for publishing jobs)', async () => {
    const { headers } = await identity.mintKey({ accountId: 'acme', scopes: ['playbook:write'] });
    const response = await read(headers);
    expect(response.statusCode).toBe(403);
    expect(response.json()).toMatchObject({
      code: 'forbidden',
      detail: 'this operation needs the playbook:read scope',
    });
  });

  it('403: a key asked to act for another account through x-account-id', async () => {
    const { headers } = await identity.mintKey({ accountId: 'acme' });
    expect((await read({ ...headers, 'x-account-id': 'acme' })).statusCode).toBe(200);
    const response = await read({ ...headers, 'x-account-id': 'globex' });
    expect(response.statusCode).toBe(403);
  });

  it("404: a key of one account never reads another account's catalogs or resources", async () => {
    const { headers } = await identity.mintKey({ accountId: 'globex' });
    const resource = await read(headers, `/v3/playbook/resources/${acmeResource.id}`);
    expect(resource.statusCode).toBe(404);
    const version = await read(
      headers,
      `/v3/playbook/resources/${acmeResource.id}/versions/${acmeResource.currentVersionId}`,
    );
    expect(version.statusCode).toBe(404);
    // org/internal means globex's own catalog: empty, and nothing of acme's.
    const resources = await read(headers, '/v3/playbook/catalogs/org/internal/resources');
    expect(resources.statusCode).toBe(200);
    expect(resources.json().data).toEqual([]);
    const catalogs = await read(headers);
    expect(JSON.stringify(catalogs.json())).not.toContain('secret-plans');

    const own = await identity.mintKey({ accountId: 'acme' });
    expect((await read(own.headers, `/v3/playbook/resources/${acmeResource.id}`)).statusCode).toBe(200);
  });

  it('uses the plan of the key’s account, as it is now (D6)', async () => {
    const db = backend.databases.primary;
    const gated = await givenCatalog(db, { slug: 'pro-only', facets: { planAccess: ['pro'] } });
    const resource = await givenResource(backend, gated, {
      slug: 'pro-guide',
      facets: { planAccess: ['pro'] },
    });
    const { headers } = await identity.mintKey({ accountId: 'initech', plan: 'free' });
    const url = `/v3/playbook/resources/${resource.id}`;
    const before = await read(headers, url);
    expect(before.statusCode).toBe(403);
    expect(before.json().code).toBe('plan_required');
    await db.updateTable('accounts').set({ plan: 'pro' }).where('id', '=', 'initech').execute();
    clock += 1000; // the cached key (and its plan) is revalidated after a second
    expect((await read(headers, url)).statusCode).toBe(200);
  });
});
