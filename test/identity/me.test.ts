import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';

const ME = '/v3/identity/me';

describe('GET /v3/identity/me (D33)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme', 'pro');
    await backend.databases.primary
      .updateTable('accounts')
      .set({ name: 'Acme <b>Corp</b>' })
      .where('id', '=', 'acme')
      .execute();
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  it("names the token's user and each of its accounts, in the token's order, with name and plan", async () => {
    const token = await identity.mintToken({ user: 'ada', accounts: ['newco', 'acme'], ttlSeconds: 600 });
    const response = await app.inject({ url: ME, headers: { authorization: `Bearer ${token}` } });
    expect(response.statusCode).toBe(200);
    const exp = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).exp as number;
    expect(response.json()).toEqual({
      user: { id: 'ada' },
      // An account nothing was written for yet has the default plan and no name.
      accounts: [
        { id: 'newco', plan: 'free' },
        { id: 'acme', name: 'Acme <b>Corp</b>', plan: 'pro' },
      ],
      tokenExpiresAt: new Date(exp * 1000).toISOString(),
    });
    expect(response.headers['cache-control']).toBe('private, no-cache');
    expect(response.headers.etag).toBeDefined();
  });

  it('lists no account for a token that names none', async () => {
    const response = await app.inject({ url: ME, headers: await identity.tokenHeaders({ user: 'bo' }) });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({ user: { id: 'bo' }, accounts: [] });
  });

  it('answers a HEAD as its GET, and 304 to a matching If-None-Match', async () => {
    const headers = await identity.tokenHeaders({ user: 'cy', accounts: ['acme'] });
    const first = await app.inject({ url: ME, headers });
    const head = await app.inject({ method: 'HEAD', url: ME, headers });
    expect(head.statusCode).toBe(200);
    expect(head.body).toBe('');
    expect(head.headers.etag).toBe(first.headers.etag);
    const again = await app.inject({
      url: ME,
      headers: { ...headers, 'if-none-match': first.headers.etag! },
    });
    expect(again.statusCode).toBe(304);
  });

  it('refuses an API key (401): a key acts for one account and is no user', async () => {
    const { headers } = await identity.mintKey({ accountId: 'acme' });
    const response = await app.inject({ url: ME, headers });
    expect(response.statusCode).toBe(401);
    expect(response.headers['www-authenticate']).toMatch(/^Bearer/);
  });

  it('refuses no credential and an expired token (401)', async () => {
    expect((await app.inject({ url: ME })).statusCode).toBe(401);
    const expired = await identity.mintToken({
      user: 'ada',
      accounts: ['acme'],
      issuedAt: Math.floor(Date.now() / 1000) - 7200,
      ttlSeconds: 60,
    });
    const response = await app.inject({ url: ME, headers: { authorization: `Bearer ${expired}` } });
    expect(response.statusCode).toBe(401);
    expect(response.json().code).toBe('unauthenticated');
  });

  it('refuses a query parameter it does not take (400 naming it)', async () => {
    const headers = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
    const response = await app.inject({ url: `${ME}?accountId=acme`, headers });
    expect(response.statusCode).toBe(400);
    expect(response.json().errors).toEqual([expect.objectContaining({ in: 'query', name: 'accountId' })]);
  });
});
