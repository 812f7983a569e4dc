import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';

const EVENTS = '/v3/identity/audit-events';

interface Event {
  id: string;
  at: string;
  action: string;
  actor: { type: string; id?: string };
  summary: string;
}

describe('GET /v3/identity/audit-events filters (D33)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let ada: Record<string, string>;
  let all: Event[];

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    ada = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
    const bo = await identity.tokenHeaders({ user: 'bo', accounts: ['acme'] });
    const create = async (headers: Record<string, string>, name: string) =>
      (
        await app.inject({
          method: 'POST',
          url: '/v3/identity/api-keys',
          headers,
          payload: { name, accountId: 'acme', scopes: ['playbook:read'] },
        })
      ).json().id as string;
    const first = await create(ada, 'first');
    await create(bo, 'second');
    await app.inject({ method: 'DELETE', url: `/v3/identity/api-keys/${first}`, headers: bo });
    await create(ada, 'third');
    all = (await app.inject({ url: `${EVENTS}?accountId=acme&pageSize=100`, headers: ada })).json().data;
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const list = async (query: string) => {
    const response = await app.inject({
      url: `${EVENTS}?accountId=acme&pageSize=100&${query}`,
      headers: ada,
    });
    expect(response.statusCode, query).toBe(200);
    return response.json() as { data: Event[]; meta: { total: number } };
  };

  it('has every event without a filter, newest first', () => {
    expect(all.map((event) => event.action)).toEqual([
      'api_key.created',
      'api_key.revoked',
      'api_key.created',
      'api_key.created',
      'account.created',
    ]);
  });

  it('action: one or several change types, repeated or comma-separated, and the total counts only those', async () => {
    const revoked = await list('action=api_key.revoked');
    expect(revoked.data.map((event) => event.summary)).toEqual([all[1]!.summary]);
    expect(revoked.meta.total).toBe(1);
    const both = await list('action=api_key.revoked,account.created');
    expect(both.data.map((event) => event.id)).toEqual([all[1]!.id, all[4]!.id]);
    const repeated = await list('action=api_key.revoked&action=account.created');
    expect(repeated.data).toEqual(both.data);
  });

  it("actor: the actor's id", async () => {
    const byBo = await list('actor=bo');
    expect(byBo.data.map((event) => event.action)).toEqual(['api_key.revoked', 'api_key.created']);
    expect(byBo.data.every((event) => event.actor.id === 'bo')).toBe(true);
    expect((await list('actor=nobody')).data).toEqual([]);
  });

  it('from (included) and to (left out) bound the time', async () => {
    const middle = all[2]!.at;
    const from = await list(`from=${middle}`);
    expect(from.data.every((event) => event.at >= middle)).toBe(true);
    expect(from.data.map((event) => event.id)).toContain(all[2]!.id);
    const to = await list(`to=${middle}`);
    expect(to.data.every((event) => event.at < middle)).toBe(true);
    expect(to.data.map((event) => event.id)).not.toContain(all[2]!.id);
    expect(from.meta.total + to.meta.total).toBe(all.length);
    // A time without milliseconds is the same instant as written with them.
    const earlier = new Date(Date.parse(all[4]!.at) - 1000).toISOString().slice(0, 19);
    const whole = await list(`from=${earlier}Z`);
    expect(whole.meta.total).toBe(all.length);
  });

  it('filters combine: an action by an actor within a time', async () => {
    const found = await list(`action=api_key.created&actor=ada&from=${all[3]!.at}`);
    expect(found.data.map((event) => event.id)).toEqual([all[0]!.id, all[3]!.id]);
  });

  it('a bad filter is a 400 naming it', async () => {
    const cases: [string, string][] = [
      ['action=api_key.exploded', 'action'],
      ['actor=', 'actor'],
      ['from=yesterday', 'from'],
      ['to=2024-02-30T00:00:00Z', 'to'],
      ['actor=a&actor=b', 'actor'],
      [`from=${all[0]!.at}&to=${all[4]!.at}`, 'to'],
    ];
    for (const [query, name] of cases) {
      const response = await app.inject({ url: `${EVENTS}?accountId=acme&${query}`, headers: ada });
      expect(response.statusCode, query).toBe(400);
      expect(
        response.json().errors.map((error: { in: string; name: string }) => `${error.in}:${error.name}`),
        query,
      ).toContain(`query:${name}`);
    }
  });

  it("filters never reach another account's events", async () => {
    const other = await identity.tokenHeaders({ user: 'ada', accounts: ['other'] });
    const response = await app.inject({ url: `${EVENTS}?accountId=acme&actor=ada`, headers: other });
    expect(response.statusCode).toBe(403);
  });
});
