import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LimitError } from '../../src/foundation/errors.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';

const KEYS = '/v3/identity/api-keys';
const KEY_PATTERN = /^svc_sk_test_[A-Za-z0-9]{16}_[A-Za-z0-9]{39}$/;

describe('key management (contract §4.5; D8)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let ada: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme', 'pro');
    ada = await identity.tokenHeaders({ user: 'ada', accounts: ['acme', 'newco'] });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const create = (payload: unknown, headers = ada) =>
    app.inject({ method: 'POST', url: KEYS, headers, payload: payload as Record<string, unknown> });
  const valid = { name: 'ci deploys', accountId: 'acme', scopes: ['playbook:read'] };

  describe('POST /v3/identity/api-keys', () => {
    it('201 with the key string, once, and the key works at once', async () => {
      const response = await create({ ...valid, scopes: ['playbook:read', 'playbook:write'] });
      expect(response.statusCode).toBe(201);
      expect(response.headers['cache-control']).toBe('no-store');
      const body = response.json();
      expect(Object.keys(body).sort()).toEqual(
        ['accountId', 'createdAt', 'environment', 'id', 'key', 'name', 'restrictions', 'scopes'].sort(),
      );
      expect(body).toMatchObject({
        name: 'ci deploys',
        accountId: 'acme',
        scopes: ['playbook:read', 'playbook:write'],
        environment: 'test',
      });
      expect(body.key).toMatch(KEY_PATTERN);
      expect(body.key.split('_')[3]).toBe(body.id);
      expect(Date.parse(body.createdAt)).toBeLessThanOrEqual(Date.now());
      const read = await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': body.key } });
      expect(read.statusCode).toBe(200);
    });

    it('keeps an expiresAt in the future, normalised to UTC milliseconds', async () => {
      const response = await create({ ...valid, expiresAt: '2099-12-31T23:59:59Z' });
      expect(response.statusCode).toBe(201);
      expect(response.json().expiresAt).toBe('2099-12-31T23:59:59.000Z');
    });

    it('creates an absent account with the free plan, and leaves an existing plan alone', async () => {
      expect((await create({ ...valid, accountId: 'newco' })).statusCode).toBe(201);
      expect((await create(valid)).statusCode).toBe(201);
      const plans = await backend.databases.primary
        .selectFrom('accounts')
        .select(['id', 'plan'])
        .where('id', 'in', ['acme', 'newco'])
        .orderBy('id')
        .execute();
      expect(plans).toEqual([
        { id: 'acme', plan: 'pro' },
        { id: 'newco', plan: 'free' },
      ]);
    });

    it('400 limit_reached past PLAYBOOK_MAX_KEYS_PER_ACCOUNT active keys; revoked and expired ones do not count (D20)', async () => {
      const capped = createTestIdentity(backend, { env: { PLAYBOOK_MAX_KEYS_PER_ACCOUNT: '3' } });
      const cappedApp = await buildIdentityApp(backend, capped);
      try {
        const headers = await capped.tokenHeaders({ user: 'ada', accounts: ['capped', 'other'] });
        const make = (body: Record<string, unknown> = {}) =>
          cappedApp.inject({
            method: 'POST',
            url: KEYS,
            headers,
            payload: { name: 'k', accountId: 'capped', scopes: ['playbook:read'], ...body },
          });
        const first = await make();
        expect(first.statusCode).toBe(201);
        // A key that has expired no longer counts: stored directly, as time passing would leave it.
        await backend.databases.primary
          .updateTable('api_keys')
          .set({ expires_at: '2000-01-01T00:00:00.000Z' })
          .where('id', '=', first.json().id)
          .execute();
        const kept = [];
        for (let i = 0; i < 3; i++) {
          const made = await make({ expiresAt: '2099-01-01T00:00:00Z' });
          expect(made.statusCode).toBe(201);
          kept.push(made.json().id as string);
        }
        const refused = await make();
        expect(refused.statusCode).toBe(400);
        expect(refused.headers['content-type']).toMatch(/^application\/problem\+json/);
        expect(refused.json()).toMatchObject({
          status: 400,
          code: 'limit_reached',
          detail:
            'account capped already holds 3 active API keys, the most this service allows; revoke one first',
        });
        // Another account has its own allowance, and nothing was written for the refused request.
        expect((await make({ accountId: 'other' })).statusCode).toBe(201);
        const list = await cappedApp.inject({ url: `${KEYS}?accountId=capped`, headers });
        expect(list.json().data).toHaveLength(4);
        // Revoking one makes room for exactly one.
        const revoked = await cappedApp.inject({ method: 'DELETE', url: `${KEYS}/${kept[0]}`, headers });
        expect(revoked.statusCode).toBe(204);
        expect((await make()).statusCode).toBe(201);
        expect((await make()).statusCode).toBe(400);
      } finally {
        await cappedApp.close();
        await capped.close();
      }
    });

    it('counts keys made at the same moment one at a time: the cap is never overshot (D20)', async () => {
      const capped = createTestIdentity(backend, { env: { PLAYBOOK_MAX_KEYS_PER_ACCOUNT: '5' } });
      try {
        const user = { subject: 'ada', accounts: ['racing'] };
        const outcomes = await Promise.allSettled(
          Array.from({ length: 12 }, (_, i) =>
            capped.keys.createFor(user, { name: `k${i}`, accountId: 'racing', scopes: ['playbook:read'] }),
          ),
        );
        expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(5);
        for (const outcome of outcomes.filter((o) => o.status === 'rejected')) {
          expect((outcome as PromiseRejectedResult).reason).toBeInstanceOf(LimitError);
        }
        expect(await capped.keys.list('racing')).toHaveLength(5);
      } finally {
        await capped.close();
      }
    });

    it('403: an account the user may not act for', async () => {
      const response = await create({ ...valid, accountId: 'globex' });
      expect(response.statusCode).toBe(403);
      expect(response.json().code).toBe('forbidden');
    });

    it('401: no token, or an API key instead of one', async () => {
      expect((await create(valid, {})).statusCode).toBe(401);
      const { headers } = await identity.mintKey({
        accountId: 'acme',
        scopes: ['playbook:read', 'playbook:write'],
      });
      expect((await create(valid, headers)).statusCode).toBe(401);
    });

    const invalid: [string, unknown, string][] = [
      ['missing name', { accountId: 'acme', scopes: ['playbook:read'] }, 'name'],
      ['missing accountId', { name: 'x', scopes: ['playbook:read'] }, 'accountId'],
      ['missing scopes', { name: 'x', accountId: 'acme' }, 'scopes'],
      ['name of the wrong type', { ...valid, name: 7 }, 'name'],
      ['accountId of the wrong type', { ...valid, accountId: 42 }, 'accountId'],
      ['scopes as a string', { ...valid, scopes: 'playbook:read' }, 'scopes'],
      ['scopes holding a number', { ...valid, scopes: [1] }, 'scopes[0]'],
      ['expiresAt of the wrong type', { ...valid, expiresAt: 4102444800 }, 'expiresAt'],
      ['empty scopes', { ...valid, scopes: [] }, 'scopes'],
      ['unknown scope', { ...valid, scopes: ['playbook:admin'] }, 'scopes[0]'],
      ['duplicate scopes', { ...valid, scopes: ['playbook:read', 'playbook:read'] }, 'scopes'],
      ['empty name', { ...valid, name: '' }, 'name'],
      ['blank name', { ...valid, name: ' \t ' }, 'name'],
      ['over-long name', { ...valid, name: 'n'.repeat(101) }, 'name'],
      ['malformed accountId', { ...valid, accountId: 'acme corp' }, 'accountId'],
      ['past expiresAt', { ...valid, expiresAt: '2020-01-01T00:00:00Z' }, 'expiresAt'],
      ['impossible date', { ...valid, expiresAt: '2099-02-30T00:00:00Z' }, 'expiresAt'],
      ['date without a zone', { ...valid, expiresAt: '2099-01-01T00:00:00' }, 'expiresAt'],
      ['unknown field', { ...valid, owner: 'me' }, 'owner'],
      ['an array instead of an object', [valid], '(root)'],
    ];
    it.each(invalid)('400: %s', async (_label, payload, field) => {
      const response = await create(payload);
      expect(response.statusCode).toBe(400);
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      const problem = response.json();
      expect(problem.code).toBe('invalid_request');
      expect(problem.errors.map((e: { in: string; name: string }) => `${e.in}:${e.name}`)).toContain(
        `body:${field}`,
      );
    });

    it('accepts a name of exactly 100 characters', async () => {
      expect((await create({ ...valid, name: 'n'.repeat(100) })).statusCode).toBe(201);
    });

    // D29: a body that is not JSON is HTTP's 415, not a 400 of its fields.
    it.each([
      ['broken JSON', 'application/json', '{"name": "x", ', 400, 'invalid_request'],
      ['an empty JSON body', 'application/json', '', 400, 'invalid_request'],
      ['a text body', 'text/plain', JSON.stringify(valid), 415, 'unsupported_media_type'],
      ['an XML body', 'application/xml', '<key name="x"/>', 415, 'unsupported_media_type'],
      [
        'a form body',
        'application/x-www-form-urlencoded',
        'name=x&accountId=acme',
        415,
        'unsupported_media_type',
      ],
    ])('%s: %i %s', async (_label, contentType, payload, status, code) => {
      const response = await app.inject({
        method: 'POST',
        url: KEYS,
        headers: { ...ada, 'content-type': contentType },
        payload,
      });
      expect(response.statusCode).toBe(status);
      expect(response.json()).toMatchObject({ status, code });
    });
  });

  describe('GET /v3/identity/api-keys', () => {
    it("lists an account's keys without secrets, with lastUsedAt and revokedAt", async () => {
      const owner = await identity.tokenHeaders({ user: 'bob', accounts: ['listco'] });
      const used = await create({ ...valid, accountId: 'listco', name: 'used' }, owner);
      const revoked = await create({ ...valid, accountId: 'listco', name: 'revoked' }, owner);
      await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': used.json().key } });
      await app.inject({ method: 'DELETE', url: `${KEYS}/${revoked.json().id}`, headers: owner });

      const response = await app.inject({ url: `${KEYS}?accountId=listco`, headers: owner });
      expect(response.statusCode).toBe(200);
      const { data, meta } = response.json();
      expect(meta).toEqual({ page: 1, pageSize: 20, pageCount: 1, total: 2 });
      expect(data.map((k: { name: string }) => k.name)).toEqual(['used', 'revoked']);
      expect(data[0].lastUsedAt).toBeDefined();
      expect(data[0].revokedAt).toBeUndefined();
      expect(data[1].revokedAt).toBeDefined();
      for (const key of data) expect(key.key).toBeUndefined();
      expect(response.body).not.toContain(used.json().key);
      expect(response.body).not.toContain(used.json().key.split('_')[4]);
    });

    it('D11: the list carries an ETag and private, no-cache; it changes when the keys do', async () => {
      const owner = await identity.tokenHeaders({ user: 'bob', accounts: ['etagco'] });
      const created = await create({ ...valid, accountId: 'etagco', name: 'first' }, owner);
      const before = await app.inject({ url: `${KEYS}?accountId=etagco`, headers: owner });
      expect(before.headers['cache-control']).toBe('private, no-cache');
      const etag = String(before.headers.etag);
      expect(etag).toMatch(/^"/);
      const unchanged = await app.inject({
        url: `${KEYS}?accountId=etagco`,
        headers: { ...owner, 'if-none-match': etag },
      });
      expect(unchanged.statusCode).toBe(304);
      await app.inject({ method: 'DELETE', url: `${KEYS}/${created.json().id}`, headers: owner });
      const after = await app.inject({
        url: `${KEYS}?accountId=etagco`,
        headers: { ...owner, 'if-none-match': etag },
      });
      expect(after.statusCode).toBe(200);
      expect(after.headers.etag).not.toBe(etag);
    });

    it('answers the pagination envelope of every list: page and pageSize, oldest key first (D3)', async () => {
      const owner = await identity.tokenHeaders({ user: 'bob', accounts: ['pagedco'] });
      const names = ['k1', 'k2', 'k3', 'k4', 'k5'];
      for (const name of names) {
        expect((await create({ ...valid, accountId: 'pagedco', name }, owner)).statusCode).toBe(201);
      }
      const page = async (query: string) => {
        const response = await app.inject({ url: `${KEYS}?accountId=pagedco${query}`, headers: owner });
        expect(response.statusCode).toBe(200);
        return response.json() as { data: { name: string }[]; meta: Record<string, number> };
      };
      const pages = [
        await page('&pageSize=2'),
        await page('&pageSize=2&page=2'),
        await page('&page=3&pageSize=2'),
      ];
      expect(pages.map((p) => p.data.map((k) => k.name))).toEqual([['k1', 'k2'], ['k3', 'k4'], ['k5']]);
      expect(pages[1]!.meta).toEqual({ page: 2, pageSize: 2, pageCount: 3, total: 5 });
      // Past the end: an empty page that still tells the total.
      expect(await page('&page=9&pageSize=2')).toEqual({
        data: [],
        meta: { page: 9, pageSize: 2, pageCount: 3, total: 5 },
      });
      for (const bad of ['&page=0', '&pageSize=101', '&pageSize=x']) {
        const response = await app.inject({ url: `${KEYS}?accountId=pagedco${bad}`, headers: owner });
        expect(response.statusCode, bad).toBe(400);
        expect(response.json().errors[0].in, bad).toBe('query');
      }
    });

    it('403: an account the user may not act for; 400: no accountId or an unknown parameter', async () => {
      expect((await app.inject({ url: `${KEYS}?accountId=globex`, headers: ada })).statusCode).toBe(403);
      expect((await app.inject({ url: KEYS, headers: ada })).statusCode).toBe(400);
      expect((await app.inject({ url: `${KEYS}?accountId=acme&sort=name`, headers: ada })).statusCode).toBe(
        400,
      );
      expect(
        (await app.inject({ url: `${KEYS}?accountId=acme&accountId=newco`, headers: ada })).statusCode,
      ).toBe(400);
    });
  });

  describe('DELETE /v3/identity/api-keys/{keyId}', () => {
    it('204, idempotently, and the key is refused at once', async () => {
      const created = (await create(valid)).json();
      const headers = { 'x-api-key': created.key };
      expect((await app.inject({ url: '/v3/playbook/catalogs', headers })).statusCode).toBe(200);
      for (let i = 0; i < 2; i++) {
        const response = await app.inject({ method: 'DELETE', url: `${KEYS}/${created.id}`, headers: ada });
        expect(response.statusCode).toBe(204);
        expect(response.body).toBe('');
      }
      expect((await app.inject({ url: '/v3/playbook/catalogs', headers })).statusCode).toBe(401);
    });

    it("404: a key of an account the user can't act for, exactly like one that does not exist", async () => {
      const created = (await create(valid)).json();
      const mallory = await identity.tokenHeaders({ user: 'mallory', accounts: ['globex'] });
      const foreign = await app.inject({ method: 'DELETE', url: `${KEYS}/${created.id}`, headers: mallory });
      const missing = await app.inject({
        method: 'DELETE',
        url: `${KEYS}/NoSuchKey0000000`,
        headers: mallory,
      });
      expect(foreign.statusCode).toBe(404);
      expect(missing.statusCode).toBe(404);
      expect(foreign.json().detail).toBe(missing.json().detail);
      // Still valid: the attempt changed nothing.
      expect(
        (await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': created.key } }))
          .statusCode,
      ).toBe(200);
    });

    it('400: a malformed key id', async () => {
      const response = await app.inject({ method: 'DELETE', url: `${KEYS}/not-a-key-id`, headers: ada });
      expect(response.statusCode).toBe(400);
      expect(response.json().errors[0]).toMatchObject({ in: 'path', name: 'keyId' });
    });
  });

  it('documents the three operations in the OpenAPI document', async () => {
    const document = (await app.inject({ url: '/v3/openapi.json' })).json();
    const operations = [
      document.paths['/v3/identity/api-keys'].post,
      document.paths['/v3/identity/api-keys'].get,
      document.paths['/v3/identity/api-keys/{keyId}'].delete,
    ];
    expect(operations.map((o: { operationId: string }) => o.operationId)).toEqual([
      'createApiKey',
      'listApiKeys',
      'revokeApiKey',
    ]);
    for (const operation of operations) expect(operation.security).toEqual([{ accessToken: [] }]);
  });
});
