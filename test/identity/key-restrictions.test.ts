import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';

const KEYS = '/v3/identity/api-keys';
const START = Date.parse('2031-05-01T12:00:00.000Z');

interface KeyObject {
  id: string;
  key?: string;
  name: string;
  expiresAt?: string;
  replacedBy?: string;
  restrictions: {
    catalogs: string[] | null;
    allowedIps: string[] | null;
    rateLimit: { limit: number; windowSeconds: number } | null;
  } | null;
}

/** D32: a key's restrictions, given at creation, shown in every key object, changed by PATCH. */
describe('key restrictions: created, read, changed (D32)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let clock = START;
  let ada: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, {
      // The deployment's limit a key's may not exceed: 600 requests a minute, 10 a second.
      env: { PLAYBOOK_RATE_LIMIT_MAX: '600', PLAYBOOK_RATE_LIMIT_WINDOW_MS: '60000' },
      options: { now: () => clock },
    });
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    ada = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'], ttlSeconds: 86_400 });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const create = (extra: Record<string, unknown> = {}, headers = ada) =>
    app.inject({
      method: 'POST',
      url: KEYS,
      headers,
      payload: { name: 'ci', accountId: 'acme', scopes: ['playbook:read'], ...extra },
    });
  const created = async (extra: Record<string, unknown> = {}): Promise<KeyObject> => {
    const response = await create(extra);
    expect(response.statusCode, response.body).toBe(201);
    return response.json();
  };
  const patch = (keyId: string, payload: unknown, headers: Record<string, string> = ada) =>
    app.inject({
      method: 'PATCH',
      url: `${KEYS}/${keyId}`,
      headers: { 'content-type': 'application/merge-patch+json', ...headers },
      payload: JSON.stringify(payload),
    });
  const get = (keyId: string, headers = ada) => app.inject({ url: `${KEYS}/${keyId}`, headers });
  const stored = (keyId: string) =>
    backend.databases.primary.selectFrom('api_keys').selectAll().where('id', '=', keyId).executeTakeFirst();
  const keyChanges = async () => (await loggedChanges(backend.databases.primary, 'acme')).length;

  it('every key object says null when a key has none: creation, list, one key', async () => {
    const key = await created();
    expect(key.restrictions).toBeNull();
    const listed = await app.inject({ url: `${KEYS}?accountId=acme`, headers: ada });
    const item = (listed.json().data as KeyObject[]).find((each) => each.id === key.id)!;
    expect(item.restrictions).toBeNull();
    const one = await get(key.id);
    expect(one.statusCode).toBe(200);
    expect(one.json()).toEqual(item);
  });

  it('creation keeps them canonical: distinct, in order, ranges at their network, mapped addresses as IPv4', async () => {
    const key = await created({
      restrictions: {
        catalogs: ['svc/handbook', 'org/runbooks', 'org/*', 'svc/handbook', 'org/alpha'],
        allowedIps: [
          '10.1.2.3/8',
          '::ffff:192.0.2.7',
          '2001:DB8::1',
          '2001:db8:0:0::1',
          '::ffff:10.0.0.0/104',
        ],
        rateLimit: { limit: 100, windowSeconds: 60 },
      },
    });
    expect(key.restrictions).toEqual({
      catalogs: ['org/*', 'svc/handbook'],
      allowedIps: ['10.0.0.0/8', '192.0.2.7', '2001:db8::1'],
      rateLimit: { limit: 100, windowSeconds: 60 },
    });
    expect((await get(key.id)).json().restrictions).toEqual(key.restrictions);
    const listed = await app.inject({ url: `${KEYS}?accountId=acme&pageSize=100`, headers: ada });
    expect((listed.json().data as KeyObject[]).find((each) => each.id === key.id)!.restrictions).toEqual(
      key.restrictions,
    );
  });

  it('fields left out of the creation are null; restrictions that restrict nothing are null', async () => {
    const some = await created({ restrictions: { allowedIps: ['203.0.113.0/24'] } });
    expect(some.restrictions).toEqual({ catalogs: null, allowedIps: ['203.0.113.0/24'], rateLimit: null });
    expect((await created({ restrictions: {} })).restrictions).toBeNull();
    expect((await created({ restrictions: { catalogs: null } })).restrictions).toBeNull();
    expect((await created({ restrictions: null })).restrictions).toBeNull();
  });

  it('PATCH is a JSON Merge Patch: a field left out is unchanged, null lifts it, restrictions: null lifts all', async () => {
    const key = await created({
      restrictions: { catalogs: ['org/runbooks'], allowedIps: ['10.0.0.0/8'] },
    });
    let response = await patch(key.id, { restrictions: { rateLimit: { limit: 5, windowSeconds: 1 } } });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers['cache-control']).toBe('no-store');
    expect(response.json().restrictions).toEqual({
      catalogs: ['org/runbooks'],
      allowedIps: ['10.0.0.0/8'],
      rateLimit: { limit: 5, windowSeconds: 1 },
    });
    response = await patch(key.id, { restrictions: { allowedIps: null, catalogs: ['org/a', 'svc/*'] } });
    expect(response.json().restrictions).toEqual({
      catalogs: ['org/a', 'svc/*'],
      allowedIps: null,
      rateLimit: { limit: 5, windowSeconds: 1 },
    });
    response = await patch(key.id, { name: 'deploys', expiresAt: '2031-06-01T00:00:00Z' });
    expect(response.json()).toMatchObject({ name: 'deploys', expiresAt: '2031-06-01T00:00:00.000Z' });
    expect(response.json().restrictions.catalogs).toEqual(['org/a', 'svc/*']);
    response = await patch(key.id, { restrictions: null, expiresAt: null });
    expect(response.json().restrictions).toBeNull();
    expect(response.json().expiresAt).toBeUndefined();
    expect(await get(key.id).then((one) => one.json())).toEqual(response.json());
    expect((await stored(key.id))?.restrictions).toBeNull();
  });

  it('takes application/json too, and refuses other media types with 415', async () => {
    const key = await created();
    const json = await app.inject({
      method: 'PATCH',
      url: `${KEYS}/${key.id}`,
      headers: ada,
      payload: { restrictions: { catalogs: ['org/runbooks'] } },
    });
    expect(json.statusCode, json.body).toBe(200);
    expect(json.json().restrictions.catalogs).toEqual(['org/runbooks']);
    const text = await app.inject({
      method: 'PATCH',
      url: `${KEYS}/${key.id}`,
      headers: { ...ada, 'content-type': 'text/plain' },
      payload: '{}',
    });
    expect(text.statusCode).toBe(415);
  });

  it('each change is one api_key.updated change, by the user, naming the fields; a patch that changes nothing writes none', async () => {
    const key = await created();
    const before = await keyChanges();
    expect((await patch(key.id, { restrictions: { allowedIps: ['10.0.0.1'] } })).statusCode).toBe(200);
    const changes = await loggedChanges(backend.databases.primary, 'acme');
    expect(changes).toHaveLength(before + 1);
    expect(changes.at(-1)).toMatchObject({
      type: 'api_key.updated',
      target: { kind: 'api_key', id: key.id },
      actor: { type: 'user', id: 'ada' },
      summary: `API key ${key.id} changed: restrictions`,
    });
    expect((await patch(key.id, {})).statusCode).toBe(200);
    expect((await patch(key.id, { restrictions: { allowedIps: ['10.0.0.1/32'] } })).statusCode).toBe(200);
    expect(await keyChanges()).toBe(before + 1);
    const audit = await app.inject({ url: '/v3/identity/audit-events?accountId=acme', headers: ada });
    expect(audit.json().data[0]).toMatchObject({ action: 'api_key.updated', target: `api-key:${key.id}` });
  });

  it('a roll hands the restrictions to the successor', async () => {
    const key = await created({
      restrictions: { catalogs: ['org/runbooks'], rateLimit: { limit: 60, windowSeconds: 60 } },
    });
    const response = await app.inject({ method: 'POST', url: `${KEYS}/${key.id}/roll`, headers: ada });
    expect(response.statusCode, response.body).toBe(201);
    expect(response.json().restrictions).toEqual(key.restrictions);
    expect((await get(response.json().id)).json().restrictions).toEqual(key.restrictions);
  });

  describe('refusals write nothing', () => {
    const invalid: [string, unknown, string][] = [
      ['an address out of range', { allowedIps: ['10.0.0.256'] }, 'restrictions.allowedIps[0]'],
      ['an IPv4 address of two parts', { allowedIps: ['10.0.0.1', '10.1'] }, 'restrictions.allowedIps[1]'],
      ['an octal-looking address', { allowedIps: ['010.0.0.1'] }, 'restrictions.allowedIps[0]'],
      ['an IPv6 zone', { allowedIps: ['fe80::1%eth0'] }, 'restrictions.allowedIps[0]'],
      ['a host name', { allowedIps: ['example.com'] }, 'restrictions.allowedIps[0]'],
      ['a prefix past 32', { allowedIps: ['10.0.0.0/33'] }, 'restrictions.allowedIps[0]'],
      ['a prefix past 128', { allowedIps: ['2001:db8::/129'] }, 'restrictions.allowedIps[0]'],
      ['a prefix that is no number', { allowedIps: ['10.0.0.0/x'] }, 'restrictions.allowedIps[0]'],
      ['an empty prefix', { allowedIps: ['10.0.0.0/'] }, 'restrictions.allowedIps[0]'],
      ['an empty list of addresses', { allowedIps: [] }, 'restrictions.allowedIps'],
      [
        '101 addresses',
        { allowedIps: Array.from({ length: 101 }, (_, i) => `10.0.0.${i}`) },
        'restrictions.allowedIps',
      ],
      ['a ref of another owner', { catalogs: ['acme/runbooks'] }, 'restrictions.catalogs[0]'],
      ['a ref that is no slug', { catalogs: ['org/Runbooks'] }, 'restrictions.catalogs[0]'],
      ['an owner alone', { catalogs: ['org/'] }, 'restrictions.catalogs[0]'],
      ['a wildcard within a slug', { catalogs: ['svc/run*'] }, 'restrictions.catalogs[0]'],
      ['a Resource ref', { catalogs: ['org/runbooks/intro'] }, 'restrictions.catalogs[0]'],
      ['an empty list of Catalogs', { catalogs: [] }, 'restrictions.catalogs'],
      [
        '101 Catalogs',
        { catalogs: Array.from({ length: 101 }, (_, i) => `org/c${i}`) },
        'restrictions.catalogs',
      ],
      ['a limit of zero', { rateLimit: { limit: 0, windowSeconds: 60 } }, 'restrictions.rateLimit.limit'],
      [
        'a window of zero',
        { rateLimit: { limit: 1, windowSeconds: 0 } },
        'restrictions.rateLimit.windowSeconds',
      ],
      [
        "a limit over the deployment's",
        { rateLimit: { limit: 601, windowSeconds: 3600 } },
        'restrictions.rateLimit.limit',
      ],
      [
        "a rate over the deployment's",
        { rateLimit: { limit: 20, windowSeconds: 1 } },
        'restrictions.rateLimit',
      ],
      ['a rate without its window', { rateLimit: { limit: 5 } }, 'restrictions.rateLimit.windowSeconds'],
      ['an unknown field', { catalogs: ['org/a'], scopes: ['x'] }, 'restrictions.scopes'],
      [
        'an unknown field of the rate',
        { rateLimit: { limit: 1, windowSeconds: 1, burst: 2 } },
        'restrictions.rateLimit.burst',
      ],
      ['a list given as text', { allowedIps: '10.0.0.0/8' }, 'restrictions.allowedIps'],
    ];

    it.each(invalid)(
      '400 at creation for %s, naming the field; no key made',
      async (_, restrictions, field) => {
        const before = await keyChanges();
        const response = await create({ restrictions });
        expect(response.statusCode, response.body).toBe(400);
        expect(response.json().errors.map((error: { name: string }) => error.name)).toEqual([field]);
        expect(await keyChanges()).toBe(before);
      },
    );

    it.each(invalid)(
      '400 on PATCH for %s, naming the field; the key unchanged',
      async (_, restrictions, field) => {
        const key = await created({ restrictions: { catalogs: ['org/runbooks'] } });
        const row = await stored(key.id);
        const before = await keyChanges();
        const response = await patch(key.id, { name: 'renamed', restrictions });
        expect(response.statusCode, response.body).toBe(400);
        expect(response.json().errors.map((error: { name: string }) => error.name)).toEqual([field]);
        expect(await stored(key.id)).toEqual(row);
        expect(await keyChanges()).toBe(before);
      },
    );

    it('400 for an unknown field of the patch, a past expiry, or restrictions of the wrong type', async () => {
      const key = await created();
      const row = await stored(key.id);
      for (const [body, field] of [
        [{ scopes: ['playbook:write'] }, 'scopes'],
        [{ expiresAt: '2020-01-01T00:00:00Z' }, 'expiresAt'],
        [{ restrictions: ['org/*'] }, 'restrictions'],
        [{ name: '' }, 'name'],
      ] as const) {
        const response = await patch(key.id, body);
        expect(response.statusCode, response.body).toBe(400);
        expect(response.json().errors[0].name).toBe(field);
      }
      expect(await stored(key.id)).toEqual(row);
    });

    it('409 key_inactive for a revoked or an expired key, key_already_rolled for a rolled one', async () => {
      const revoked = await created();
      await app.inject({ method: 'DELETE', url: `${KEYS}/${revoked.id}`, headers: ada });
      const expiring = await created({ expiresAt: new Date(clock + 60_000).toISOString() });
      const rolled = await created();
      const roll = await app.inject({ method: 'POST', url: `${KEYS}/${rolled.id}/roll`, headers: ada });
      const before = await keyChanges();
      clock += 120_000;
      try {
        const rows = await Promise.all([revoked, expiring, rolled].map((key) => stored(key.id)));
        const change = { restrictions: { catalogs: ['org/runbooks'] } };
        const refusals = await Promise.all([revoked, expiring, rolled].map((key) => patch(key.id, change)));
        expect(refusals.map((response) => [response.statusCode, response.json().code])).toEqual([
          [409, 'key_inactive'],
          [409, 'key_inactive'],
          [409, 'key_already_rolled'],
        ]);
        expect(refusals[2]!.json().replacedBy).toBe(roll.json().id);
        expect(await Promise.all([revoked, expiring, rolled].map((key) => stored(key.id)))).toEqual(rows);
        expect(await keyChanges()).toBe(before);
      } finally {
        clock = START;
      }
    });

    it("404 for another account's key or none, exactly alike; 401 without an access token", async () => {
      const globex = await identity.mintKey({ accountId: 'globex' });
      const unknown = 'ZZZZZZZZZZZZZZZZ';
      for (const keyId of [globex.id, unknown]) {
        expect((await get(keyId)).statusCode).toBe(404);
        const response = await patch(keyId, { restrictions: null });
        expect(response.statusCode).toBe(404);
        expect(response.json().detail).toBe('no such API key');
      }
      const own = await created();
      expect((await get(own.id, { 'x-api-key': own.key! })).statusCode).toBe(401);
      expect((await patch(own.id, { restrictions: null }, { 'x-api-key': own.key! })).statusCode).toBe(401);
    });
  });
});
