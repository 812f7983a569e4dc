import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { composeApiKey, generateApiKey, parseApiKey } from '../../src/schemas/api-key-format.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, tamperDatabaseText } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';

/**
 * D32 on both stacks: a key's answers counted by hour and outcome, gathered in memory and written in
 * batches (never a write per request), read by day or hour with the key's last use, kept 90 days,
 * across a restart (a graceful stop writes what is left; a crash loses at most one interval) and
 * across two instances.
 */

const KEYS = '/v3/identity/api-keys';
const CATALOGS = '/v3/playbook/catalogs';
const DAY_MS = 86_400_000;
/** Mid-morning, UTC: a few hours either way stay in the same day. */
const START = Date.parse('2031-07-15T10:20:00.000Z');

type Headers = Record<string, string>;
interface Bucket {
  start: string;
  success: number;
  clientError: number;
  unauthorized: number;
  rateLimited: number;
  serverError: number;
}

const ZERO = { success: 0, clientError: 0, unauthorized: 0, rateLimited: 0, serverError: 0 };

describe("a key's usage (D32)", () => {
  let backend: TestBackend;
  let clock = START;
  const now = () => clock;
  /** Every identity and app a test makes, closed at the end but for those it abandons as crashed. */
  const open: { identity: TestIdentity; app: FastifyInstance }[] = [];
  let ada: Headers;

  async function instance(): Promise<{ identity: TestIdentity; app: FastifyInstance }> {
    const identity = createTestIdentity(backend, {
      env: { PLAYBOOK_RATE_LIMIT_MAX: '1000' },
      options: { now },
    });
    const app = await buildIdentityApp(backend, identity);
    const made = { identity, app };
    open.push(made);
    return made;
  }
  async function close(made: { identity: TestIdentity; app: FastifyInstance }): Promise<void> {
    open.splice(open.indexOf(made), 1);
    await made.app.close();
    await made.identity.close();
  }

  let first: { identity: TestIdentity; app: FastifyInstance };

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    first = await instance();
    ada = await first.identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
  });
  afterAll(async () => {
    for (const made of [...open]) await close(made);
    await backend.cleanup();
  });

  const usageOf = async (app: FastifyInstance, keyId: string, query = '', headers = ada) => {
    const response = await app.inject({ url: `${KEYS}/${keyId}/usage${query}`, headers });
    expect(response.statusCode, response.body).toBe(200);
    return response.json() as { keyId: string; granularity: string; buckets: Bucket[]; lastUsed: unknown };
  };
  const totals = (buckets: readonly Bucket[]) =>
    buckets.reduce(
      (sum, bucket) => ({
        success: sum.success + bucket.success,
        clientError: sum.clientError + bucket.clientError,
        unauthorized: sum.unauthorized + bucket.unauthorized,
        rateLimited: sum.rateLimited + bucket.rateLimited,
        serverError: sum.serverError + bucket.serverError,
      }),
      ZERO,
    );
  const storedRows = async (keyId: string) =>
    backend.databases.primary.selectFrom('api_key_usage').selectAll().where('key_id', '=', keyId).execute();
  const mint = (identity: TestIdentity, extra: Record<string, unknown> = {}) =>
    identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'], ...extra });

  it('counts every answer by outcome, 401 and 403 of its id as unauthorized, and writes nothing per request', async () => {
    clock = START;
    const { app, identity } = first;
    const key = await mint(identity, { restrictions: { rateLimit: { limit: 12, windowSeconds: 60 } } });
    const read = (url: string, headers: Headers = key.headers, remoteAddress = '203.0.113.5') =>
      app.inject({ url, headers, remoteAddress });
    const put = await app.inject({
      method: 'PUT',
      url: `${CATALOGS}/org/handbook`,
      headers: key.headers,
      payload: { name: 'Handbook', version: '1', resources: [publishedResource('intro')] },
    });
    expect(put.statusCode).toBe(201);
    const listed = await read(`${CATALOGS}/org/handbook/resources`);
    const resource = listed.json().data[0] as {
      id: string;
      currentVersion: { id: string; contentHash: string };
    };
    const etag = listed.headers.etag as string;
    expect(
      (await read(`${CATALOGS}/org/handbook/resources`, { ...key.headers, 'if-none-match': etag }))
        .statusCode,
    ).toBe(304);
    expect((await read(`/v3/playbook/resources/${resource.id}`)).statusCode).toBe(200);
    expect((await read('/v3/playbook/resources/01a22037-2a88-71fd-9738-e8fc77180d18')).statusCode).toBe(404);
    expect((await read(`${CATALOGS}?page=0`)).statusCode).toBe(400);
    // A scope a key lacks (that key's usage), and a wrong secret for this key's id.
    const readOnly = await identity.mintKey({ accountId: 'acme' });
    const forbidden = await app.inject({
      method: 'DELETE',
      url: `${CATALOGS}/org/handbook`,
      headers: readOnly.headers,
    });
    expect(forbidden.statusCode).toBe(403);
    expect(totals((await usageOf(app, readOnly.id)).buckets)).toEqual({ ...ZERO, unauthorized: 1 });
    const wrongSecret = composeApiKey('test', key.id, generateApiKey('test').secret);
    expect((await read(CATALOGS, { 'x-api-key': wrongSecret }, '198.51.100.66')).statusCode).toBe(401);
    // An id that does not exist counts nowhere.
    const unknown = composeApiKey('test', 'NoSuchKeyId00000', parseApiKey(key.key)!.secret);
    expect((await read(CATALOGS, { 'x-api-key': unknown })).statusCode).toBe(401);
    // Content that no longer matches its hash: 500.
    await tamperDatabaseText(backend, resource.currentVersion.contentHash, 'tampered');
    const version = `/v3/playbook/resources/${resource.id}/versions/${resource.currentVersion.id}`;
    expect((await read(version)).statusCode).toBe(500);
    // Past its own rate (12 a minute): the rest of the twelve, then one more.
    let statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await read(CATALOGS)).statusCode);
    statuses = statuses.filter((status) => status === 429);
    expect(statuses.length).toBeGreaterThan(0);

    expect(await storedRows(key.id)).toEqual([]);
    const before = await usageOf(app, key.id, '?granularity=hour');
    const hour = before.buckets.at(-1)!;
    expect(hour.start).toBe('2031-07-15T10:00:00.000Z');
    // Successes: the PUT, the list, the 304 and the detail, then the reads of the Catalogs before the 429.
    expect(hour).toEqual({
      start: hour.start,
      success: 4 + (6 - statuses.length),
      clientError: 2,
      unauthorized: 1,
      rateLimited: statuses.length,
      serverError: 1,
    });
    expect(before.lastUsed).toEqual({ at: new Date(clock).toISOString(), address: '203.0.113.5' });
    await identity.usage.flush();
    expect(await storedRows(key.id)).toHaveLength(1);
    expect(await usageOf(app, key.id, '?granularity=hour')).toEqual(before);
    const stored = await backend.databases.primary
      .selectFrom('api_keys')
      .select(['last_used_at', 'last_used_address'])
      .where('id', '=', key.id)
      .executeTakeFirstOrThrow();
    expect(stored).toEqual({ last_used_at: new Date(clock).toISOString(), last_used_address: '203.0.113.5' });
    expect(
      await backend.databases.primary
        .selectFrom('api_key_usage')
        .select('key_id')
        .where('key_id', '=', 'NoSuchKeyId00000')
        .execute(),
    ).toEqual([]);
  });

  it('answers every bucket of the range, 7 days by day by default, counts of zero included', async () => {
    const { app, identity } = first;
    const key = await mint(identity);
    clock = START - 2 * DAY_MS;
    await app.inject({ url: CATALOGS, headers: key.headers });
    clock = START;
    await app.inject({ url: CATALOGS, headers: key.headers });
    await app.inject({ url: CATALOGS, headers: key.headers });
    const byDay = await usageOf(app, key.id);
    expect(byDay.granularity).toBe('day');
    expect(byDay.buckets.map((bucket) => bucket.start)).toEqual(
      [6, 5, 4, 3, 2, 1, 0].map((days) =>
        new Date(Date.parse('2031-07-15T00:00:00.000Z') - days * DAY_MS).toISOString(),
      ),
    );
    expect(byDay.buckets.map((bucket) => bucket.success)).toEqual([0, 0, 0, 0, 1, 0, 2]);
    const byHour = await usageOf(app, key.id, '?granularity=hour');
    expect(byHour.buckets).toHaveLength(168);
    expect(byHour.buckets.at(-1)).toEqual({ ...ZERO, start: '2031-07-15T10:00:00.000Z', success: 2 });
    const some = await usageOf(
      app,
      key.id,
      '?granularity=hour&from=2031-07-13T09:30:00Z&to=2031-07-13T12:00:00Z',
    );
    expect(some.buckets.map((bucket) => [bucket.start, bucket.success])).toEqual([
      ['2031-07-13T09:00:00.000Z', 0],
      ['2031-07-13T10:00:00.000Z', 1],
      ['2031-07-13T11:00:00.000Z', 0],
    ]);
    // None in the future.
    const ahead = await usageOf(
      app,
      key.id,
      '?granularity=day&from=2031-07-14T00:00:00Z&to=2031-08-01T00:00:00Z',
    );
    expect(ahead.buckets.map((bucket) => bucket.start)).toEqual([
      '2031-07-14T00:00:00.000Z',
      '2031-07-15T00:00:00.000Z',
    ]);
  });

  it('400 naming the parameter for a range past 90 days, an empty one, or an unknown one; 404 and 401 as for keys', async () => {
    const { app, identity } = first;
    const key = await mint(identity);
    for (const [query, name] of [
      [`?from=${new Date(START - 91 * DAY_MS).toISOString()}`, 'from'],
      ['?from=2031-07-14T00:00:00Z&to=2031-07-14T00:00:00Z', 'to'],
      ['?granularity=week', 'granularity'],
      ['?from=yesterday', 'from'],
      ['?since=2031-07-14T00:00:00Z', 'since'],
    ] as const) {
      const response = await app.inject({ url: `${KEYS}/${key.id}/usage${query}`, headers: ada });
      expect(response.statusCode, query).toBe(400);
      expect(response.json().errors[0].name, query).toBe(name);
    }
    const globex = await identity.mintKey({ accountId: 'globex' });
    expect((await app.inject({ url: `${KEYS}/${globex.id}/usage`, headers: ada })).statusCode).toBe(404);
    expect((await app.inject({ url: `${KEYS}/${key.id}/usage`, headers: key.headers })).statusCode).toBe(401);
  });

  it('keeps 90 days: older hours are deleted as they age', async () => {
    const { app, identity } = first;
    const key = await mint(identity);
    clock = START;
    await app.inject({ url: CATALOGS, headers: key.headers });
    await identity.usage.flush();
    expect(await storedRows(key.id)).toHaveLength(1);
    clock = START + 89 * DAY_MS;
    await identity.usage.flush();
    expect(await storedRows(key.id)).toHaveLength(1);
    clock = START + 92 * DAY_MS;
    await identity.usage.flush();
    expect(await storedRows(key.id)).toEqual([]);
    clock = START;
  });

  it('across a restart: a graceful stop writes what is left; a crash loses what its last interval gathered, no more', async () => {
    clock = START;
    const crashing = await instance();
    const key = await mint(crashing.identity);
    const read = (app: FastifyInstance) => app.inject({ url: CATALOGS, headers: key.headers });
    for (let i = 0; i < 3; i++) await read(crashing.app);
    // The interval's flush, then two more requests before the process dies without another.
    await crashing.identity.usage.flush();
    for (let i = 0; i < 2; i++) await read(crashing.app);
    open.splice(open.indexOf(crashing), 1);
    await crashing.app.close();

    const restarted = await instance();
    expect(totals((await usageOf(restarted.app, key.id)).buckets).success).toBe(3);
    for (let i = 0; i < 4; i++) await read(restarted.app);
    await close(restarted);

    const again = await instance();
    expect(totals((await usageOf(again.app, key.id)).buckets).success).toBe(7);
  });

  it('across two instances: each adds its counts to the same hours', async () => {
    clock = START;
    const [a, b] = [await instance(), await instance()];
    const key = await mint(a.identity);
    for (let i = 0; i < 3; i++) await a.app.inject({ url: CATALOGS, headers: key.headers });
    // B's uses come later: its address is the last use's, whichever instance writes first.
    clock = START + 1000;
    for (let i = 0; i < 5; i++)
      await b.app.inject({ url: CATALOGS, headers: key.headers, remoteAddress: '192.0.2.9' });
    await b.app.inject({
      url: '/v3/playbook/resources/01a22037-2a88-71fd-9738-e8fc77180d18',
      headers: key.headers,
      remoteAddress: '192.0.2.9',
    });
    // Each sees its own before it writes; then both write at once.
    expect(totals((await usageOf(a.app, key.id)).buckets).success).toBe(3);
    await Promise.all([a.identity.usage.flush(), b.identity.usage.flush()]);
    expect(await storedRows(key.id)).toHaveLength(1);
    for (const made of [a, b]) {
      const usage = await usageOf(made.app, key.id);
      expect(totals(usage.buckets)).toEqual({ ...ZERO, success: 8, clientError: 1 });
      expect(usage.lastUsed).toEqual({ at: new Date(START + 1000).toISOString(), address: '192.0.2.9' });
    }
    clock = START;
  });
});
