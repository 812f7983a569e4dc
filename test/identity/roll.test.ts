import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog } from '../helpers/fixtures.js';

const KEYS = '/v3/identity/api-keys';
const START = Date.parse('2031-03-01T12:00:00.000Z');

/** D22: `POST /v3/identity/api-keys/{keyId}/roll`, rotation in one call. */
describe('rolling an API key (D22)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let clock = START;
  let ada: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, {
      env: { PLAYBOOK_MAX_KEYS_PER_ACCOUNT: '5' },
      options: { now: () => clock },
    });
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    ada = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'], ttlSeconds: 86_400 });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const create = async (accountId = 'acme', extra: Record<string, unknown> = {}) => {
    const headers = accountId === 'acme' ? ada : await identity.tokenHeaders({ accounts: [accountId] });
    const response = await app.inject({
      method: 'POST',
      url: KEYS,
      headers,
      payload: { name: 'deploys', accountId, scopes: ['playbook:read', 'playbook:write'], ...extra },
    });
    expect(response.statusCode, response.body).toBe(201);
    return response.json() as { id: string; key: string };
  };
  const roll = (keyId: string, payload?: unknown, headers = ada) =>
    app.inject({
      method: 'POST',
      url: `${KEYS}/${keyId}/roll`,
      headers,
      ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
    });
  const readWith = async (key: string) =>
    (await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': key } })).statusCode;
  const listed = async (keyId: string) => {
    const response = await app.inject({ url: `${KEYS}?accountId=acme&pageSize=100`, headers: ada });
    return (response.json().data as { id: string }[]).find((key) => key.id === keyId) as Record<
      string,
      unknown
    >;
  };
  const revokeAll = async () => {
    const response = await app.inject({ url: `${KEYS}?accountId=acme&pageSize=100`, headers: ada });
    for (const key of response.json().data as { id: string }[]) {
      await app.inject({ method: 'DELETE', url: `${KEYS}/${key.id}`, headers: ada });
    }
  };

  it('201: a new key of the same name, account and scopes; the old one works for the overlap, then expires', async () => {
    clock = START;
    const old = await create();
    expect(await readWith(old.key)).toBe(200);
    const response = await roll(old.id, { overlapSeconds: 600 });
    expect(response.statusCode).toBe(201);
    expect(response.headers['cache-control']).toBe('no-store');
    const rolled = response.json();
    expect(Object.keys(rolled).sort()).toEqual(
      ['accountId', 'createdAt', 'environment', 'id', 'key', 'name', 'restrictions', 'scopes'].sort(),
    );
    expect(rolled).toMatchObject({
      name: 'deploys',
      accountId: 'acme',
      scopes: ['playbook:read', 'playbook:write'],
      environment: 'test',
      createdAt: new Date(START).toISOString(),
    });
    expect(rolled.id).not.toBe(old.id);
    expect(rolled.key).not.toBe(old.key);
    // Both work side by side: no moment when neither does.
    expect(await readWith(old.key)).toBe(200);
    expect(await readWith(rolled.key)).toBe(200);
    expect((await listed(old.id)).expiresAt).toBe(new Date(START + 600_000).toISOString());
    expect((await listed(rolled.id)).expiresAt).toBeUndefined();
    clock = START + 599_000;
    expect(await readWith(old.key)).toBe(200);
    clock = START + 600_000;
    expect(await readWith(old.key)).toBe(401);
    expect(await readWith(rolled.key)).toBe(200);
    // D26: the roll is a change of the log, written with it.
    expect((await loggedChanges(backend.databases.primary, 'acme')).slice(-1)).toEqual([
      {
        seq: expect.any(Number),
        id: expect.any(String),
        type: 'api_key.rolled',
        at: new Date(START).toISOString(),
        namespace: 'acme',
        target: { kind: 'api_key', id: old.id },
        actor: { type: 'user', id: 'ada' },
        requestId: response.headers['x-request-id'],
        summary: `API key ${old.id} rolled; replaced by ${rolled.id}`,
      },
    ]);
    await revokeAll();
  });

  it('overlaps one day when the body is empty or absent, and ends the old key at once with 0, even where it was cached', async () => {
    clock = START;
    for (const payload of [undefined, {}]) {
      const old = await create();
      const response = await roll(old.id, payload);
      expect(response.statusCode).toBe(201);
      expect((await listed(old.id)).expiresAt).toBe(new Date(START + 86_400_000).toISOString());
    }
    const cached = await create();
    expect(await readWith(cached.key)).toBe(200);
    const now = await roll(cached.id, { overlapSeconds: 0 });
    expect(now.statusCode).toBe(201);
    // The verifier held the old key; the roll's announcement evicted it.
    const refused = await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': cached.key } });
    expect(refused.statusCode).toBe(401);
    expect(refused.json().detail).toBe('the API key has expired');
    expect(await readWith(now.json().key)).toBe(200);
    await revokeAll();
  });

  it('never lengthens an expiry: a key due sooner than the overlap keeps its own date', async () => {
    clock = START;
    const soon = await create('acme', { expiresAt: new Date(START + 60_000).toISOString() });
    expect((await roll(soon.id, { overlapSeconds: 3600 })).statusCode).toBe(201);
    expect((await listed(soon.id)).expiresAt).toBe(new Date(START + 60_000).toISOString());
    await revokeAll();
  });

  it('409 key_inactive for a revoked or an expired key', async () => {
    clock = START;
    const revoked = await create();
    await app.inject({ method: 'DELETE', url: `${KEYS}/${revoked.id}`, headers: ada });
    const expiring = await create('acme', { expiresAt: new Date(START + 1000).toISOString() });
    clock = START + 1000;
    for (const [key, reason] of [
      [revoked, 'is revoked'],
      [expiring, 'has expired'],
    ] as const) {
      const response = await roll(key.id, { overlapSeconds: 60 });
      expect(response.statusCode).toBe(409);
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(response.json()).toMatchObject({
        status: 409,
        code: 'key_inactive',
        title: 'Key not active',
        detail: `the API key ${reason}; create a new key instead`,
      });
    }
    await revokeAll();
  });

  it('D29: a key rolls once: a second roll is 409 key_already_rolled naming the successor, which rolls in turn', async () => {
    clock = START;
    const old = await create();
    const first = await roll(old.id, { overlapSeconds: 600 });
    expect(first.statusCode).toBe(201);
    const successor = first.json() as { id: string; key: string };
    const again = await roll(old.id, { overlapSeconds: 600 });
    expect(again.statusCode).toBe(409);
    expect(again.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(again.json()).toMatchObject({
      status: 409,
      code: 'key_already_rolled',
      title: 'Key already rolled',
      type: '/docs/problems/key_already_rolled',
      replacedBy: successor.id,
    });
    expect(again.json().detail).toContain(successor.id);
    // The key object says what replaced it and until when it works; the successor says neither.
    expect(await listed(old.id)).toMatchObject({
      replacedBy: successor.id,
      expiresAt: new Date(START + 600_000).toISOString(),
    });
    expect((await listed(successor.id)).replacedBy).toBeUndefined();
    expect((await listed(successor.id)).expiresAt).toBeUndefined();
    // The refused roll minted nothing and changed nothing: one roll in the log, the old expiry kept.
    const rolls = (await loggedChanges(backend.databases.primary, 'acme')).filter(
      (change) => change.type === 'api_key.rolled' && change.target.id === old.id,
    );
    expect(rolls).toHaveLength(1);
    expect(await readWith(old.key)).toBe(200);
    // The chain goes on from the successor.
    const next = await roll(successor.id, { overlapSeconds: 60 });
    expect(next.statusCode).toBe(201);
    expect((await listed(successor.id)).replacedBy).toBe(next.json().id);
    await revokeAll();
  });

  it('D29: two rolls of one key at once, on one instance or on two, leave exactly one successor', async () => {
    clock = START;
    const other = createTestIdentity(backend, { options: { now: () => clock } });
    const second = await buildIdentityApp(backend, other);
    try {
      for (const apps of [
        [app, app],
        [app, second],
      ]) {
        const old = await create();
        const keysBefore = (
          await app.inject({ url: `${KEYS}?accountId=acme&pageSize=100`, headers: ada })
        ).json().meta.total as number;
        const answers = await Promise.all(
          apps.map((instance) =>
            instance.inject({ method: 'POST', url: `${KEYS}/${old.id}/roll`, headers: ada, payload: {} }),
          ),
        );
        const statuses = answers.map((answer) => answer.statusCode).sort();
        expect(statuses).toEqual([201, 409]);
        const won = answers.find((answer) => answer.statusCode === 201)!.json() as { id: string };
        const lost = answers.find((answer) => answer.statusCode === 409)!.json();
        expect(lost).toMatchObject({ code: 'key_already_rolled', replacedBy: won.id });
        const after = await app.inject({ url: `${KEYS}?accountId=acme&pageSize=100`, headers: ada });
        expect(after.json().meta.total).toBe(keysBefore + 1);
        expect(await listed(old.id)).toMatchObject({ replacedBy: won.id });
        await revokeAll();
      }
    } finally {
      await second.close();
      await other.close();
    }
  });

  it("404 for an unknown key and for another account's key, which stays untouched", async () => {
    clock = START;
    const theirs = await create('globex');
    for (const keyId of ['AAAAAAAAAAAAAAAA', theirs.id]) {
      const response = await roll(keyId, { overlapSeconds: 60 });
      expect(response.statusCode).toBe(404);
      expect(response.json()).toMatchObject({ code: 'not_found', detail: 'no such API key' });
    }
    expect(await readWith(theirs.key)).toBe(200);
    clock = START + 3_600_000;
    expect(await readWith(theirs.key)).toBe(200);
  });

  it('400 naming the field for an overlap out of bounds, of another type, or an unknown field; nothing rolled', async () => {
    clock = START;
    const key = await create();
    for (const [payload, name] of [
      [{ overlapSeconds: -1 }, 'overlapSeconds'],
      [{ overlapSeconds: 604_801 }, 'overlapSeconds'],
      [{ overlapSeconds: 1.5 }, 'overlapSeconds'],
      [{ overlapSeconds: '60' }, 'overlapSeconds'],
      [{ overlap: 60 }, 'overlap'],
      [[60], '(root)'],
    ] as const) {
      const response = await roll(key.id, payload);
      expect(response.statusCode, JSON.stringify(payload)).toBe(400);
      expect(response.json().errors[0]).toMatchObject({ in: 'body', name });
    }
    const badId = await roll('not-a-key-id', { overlapSeconds: 60 });
    expect(badId.statusCode).toBe(400);
    expect(badId.json().errors[0]).toMatchObject({ in: 'path', name: 'keyId' });
    expect((await listed(key.id)).expiresAt).toBeUndefined();
    await revokeAll();
  });

  it('401 with an API key or no credential: key management takes an access token only', async () => {
    clock = START;
    const key = await create();
    for (const headers of [{ 'x-api-key': key.key }, {}] as Record<string, string>[]) {
      const response = await roll(key.id, { overlapSeconds: 60 }, headers);
      expect(response.statusCode).toBe(401);
      expect(response.json().code).toBe('unauthenticated');
    }
    expect((await listed(key.id)).expiresAt).toBeUndefined();
    await revokeAll();
  });

  it('D20: an account at its cap may roll once past it, not twice while the first overlaps', async () => {
    clock = START;
    const keys = [await create(), await create(), await create(), await create(), await create()];
    const first = await roll(keys[0]!.id, { overlapSeconds: 600 });
    expect(first.statusCode).toBe(201);
    const second = await roll(keys[1]!.id, { overlapSeconds: 600 });
    expect(second.statusCode).toBe(400);
    expect(second.json()).toMatchObject({ code: 'limit_reached' });
    expect((await listed(keys[1]!.id)).expiresAt).toBeUndefined();
    // Once the first overlap ends, the account is back at its cap and may roll again.
    clock = START + 600_000;
    expect((await roll(keys[1]!.id, { overlapSeconds: 600 })).statusCode).toBe(201);
    await revokeAll();
  });
});
