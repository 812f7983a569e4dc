import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/wait.js';
import { Receiver, startWebhookInstance, userHeaders } from '../helpers/webhooks.js';

/**
 * D32 on both stacks: an `api_key.expiring` change 7 days and 1 day before a key's expiresAt, once
 * each whatever the number of instances, only for a threshold crossed after the expiry was set, none
 * for a key replaced by a roll (nor a revoked one).
 */

const KEYS = '/v3/identity/api-keys';
const DAY_MS = 86_400_000;
const START = Date.parse('2031-03-02T08:00:00.000Z');

describe('expiry notices (D32)', () => {
  let backend: TestBackend;
  let clock = START;
  /** Each test's own time, 60 days from the others': the keys of one are expired in the next. */
  let base = START;
  const now = () => clock;
  let a: TestIdentity;
  let b: TestIdentity;
  let app: FastifyInstance;

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
    // Two instances on one database, each with its own sweep.
    [a, b] = [
      createTestIdentity(backend, { options: { now } }),
      createTestIdentity(backend, { options: { now } }),
    ];
    app = await buildIdentityApp(backend, a);
  });
  afterAll(async () => {
    await app.close();
    await a.close();
    await b.close();
    await backend.cleanup();
  });

  /** A user's access token of the account, signed at the clock's time. */
  const managing = () => a.tokenHeaders({ user: 'ada', accounts: ['acme'] });
  /** The expiry notices of `keyId` in the change log, by summary. */
  const noticesOf = async (keyId: string) =>
    (await loggedChanges(backend.databases.primary, 'acme'))
      .filter((change) => change.type === 'api_key.expiring' && change.target.id === keyId)
      .map((change) => ({ summary: change.summary, actor: change.actor }));
  /** Both instances sweep at once, at `at`. */
  const sweepAt = async (at: number) => {
    clock = at;
    return (await Promise.all([a.expiryNotices.sweep(), b.expiryNotices.sweep()])).reduce((x, y) => x + y);
  };
  const expiring = (days: number) =>
    a.mintKey({ accountId: 'acme', expiresAt: new Date(clock + days * DAY_MS).toISOString() });

  it('7 days and 1 day before, once each across two instances, by the service', async () => {
    base = START + 1 * 60 * DAY_MS;
    clock = base;
    const key = await expiring(10);
    const expiresAt = new Date(base + 10 * DAY_MS).toISOString();
    expect(await sweepAt(base + 2 * DAY_MS)).toBe(0);
    expect(await sweepAt(base + 3 * DAY_MS)).toBe(1);
    expect(await sweepAt(base + 3 * DAY_MS + 60_000)).toBe(0);
    expect(await sweepAt(base + 8 * DAY_MS)).toBe(0);
    expect(await sweepAt(base + 9 * DAY_MS + 1)).toBe(1);
    expect(await sweepAt(base + 9 * DAY_MS + 120_000)).toBe(0);
    expect(await sweepAt(base + 11 * DAY_MS)).toBe(0);
    expect(await noticesOf(key.id)).toEqual([
      { summary: `API key ${key.id} expires at ${expiresAt}, in 7 days`, actor: { type: 'service' } },
      { summary: `API key ${key.id} expires at ${expiresAt}, in 1 day`, actor: { type: 'service' } },
    ]);
    // In the audit list as the service's.
    clock = base + 11 * DAY_MS;
    const audit = await app.inject({
      url: `/v3/identity/audit-events?accountId=acme`,
      headers: await managing(),
    });
    expect(audit.statusCode).toBe(200);
    const events = (audit.json().data as { action: string; target: string; actor: unknown }[]).filter(
      (event) => event.action === 'api_key.expiring' && event.target === `api-key:${key.id}`,
    );
    expect(events).toHaveLength(2);
    expect(events[0]!.actor).toEqual({ type: 'service' });
  });

  it('none for a threshold already crossed when the expiry was set, at creation or by a change', async () => {
    base = START + 2 * 60 * DAY_MS;
    clock = base;
    const soon = await expiring(5);
    expect(await sweepAt(base + 60_000)).toBe(0);
    expect(await sweepAt(base + 4 * DAY_MS + 1)).toBe(1);
    expect((await noticesOf(soon.id)).map((notice) => notice.summary)).toEqual([
      `API key ${soon.id} expires at ${new Date(base + 5 * DAY_MS).toISOString()}, in 1 day`,
    ]);

    clock = base;
    const later = await expiring(30);
    clock = base + DAY_MS;
    // Brought within a day: neither threshold is noticed for this expiry.
    const expiresAt = new Date(clock + 12 * 3_600_000).toISOString();
    const patched = await app.inject({
      method: 'PATCH',
      url: `${KEYS}/${later.id}`,
      headers: await managing(),
      payload: { expiresAt },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(await sweepAt(clock + 60_000)).toBe(0);
    expect(await noticesOf(later.id)).toEqual([]);
    // Moved 20 days out again: a new expiry, whose thresholds are noticed as they are crossed.
    const moved = await app.inject({
      method: 'PATCH',
      url: `${KEYS}/${later.id}`,
      headers: await managing(),
      payload: { expiresAt: new Date(clock + 20 * DAY_MS).toISOString() },
    });
    expect(moved.statusCode).toBe(200);
    expect(await sweepAt(clock + 13 * DAY_MS + 1)).toBe(1);
    expect(await noticesOf(later.id)).toHaveLength(1);
  });

  it('only the nearest threshold when both were crossed while no instance ran', async () => {
    base = START + 3 * 60 * DAY_MS;
    clock = base;
    const key = await expiring(10);
    expect(await sweepAt(base + 9 * DAY_MS + 1)).toBe(1);
    expect(await sweepAt(base + 9 * DAY_MS + 60_000)).toBe(0);
    expect((await noticesOf(key.id)).map((notice) => notice.summary.slice(-8))).toEqual(['in 1 day']);
  });

  it('none for a key replaced by a roll, nor for a revoked one', async () => {
    base = START + 4 * 60 * DAY_MS;
    clock = base;
    const rolled = await expiring(10);
    const revoked = await expiring(10);
    const roll = await app.inject({
      method: 'POST',
      url: `${KEYS}/${rolled.id}/roll`,
      headers: await managing(),
      payload: { overlapSeconds: 604_800 },
    });
    expect(roll.statusCode, roll.body).toBe(201);
    expect(
      (await app.inject({ method: 'DELETE', url: `${KEYS}/${revoked.id}`, headers: await managing() }))
        .statusCode,
    ).toBe(204);
    expect(await sweepAt(base + 60_000)).toBe(0);
    expect(await sweepAt(base + 6 * DAY_MS + 1)).toBe(0);
    expect(await sweepAt(base + 9 * DAY_MS + 1)).toBe(0);
    expect(await noticesOf(rolled.id)).toEqual([]);
    expect(await noticesOf(revoked.id)).toEqual([]);
  });

  it('each instance looks for due notices by itself once started', async () => {
    base = START + 5 * 60 * DAY_MS;
    clock = base;
    const key = await expiring(3);
    const started = createTestIdentity(backend, { options: { now, expiryNoticeIntervalMs: 20 } });
    try {
      clock = base + 2 * DAY_MS + 1;
      started.expiryNotices.start();
      await waitFor('the started sweep makes the notice', async () => (await noticesOf(key.id)).length === 1);
    } finally {
      await started.close();
    }
  });

  it("reaches the account's webhook endpoints subscribed to api_key.expiring, as every change does", async () => {
    const instance = await startWebhookInstance(backend);
    const receiver = await Receiver.start();
    try {
      const ada = await userHeaders(instance, ['acme']);
      const endpoint = await instance.app.inject({
        method: 'POST',
        url: '/v3/identity/webhook-endpoints',
        headers: ada,
        payload: { accountId: 'acme', url: receiver.url('/expiring'), events: ['api_key.expiring'] },
      });
      expect(endpoint.statusCode, endpoint.body).toBe(201);
      // Made to expire in 8 days, then brought within 7 as time would: the 7-day threshold is crossed
      // after the expiry was set.
      const key = await instance.services.identity.keys.create({
        name: 'soon',
        accountId: 'acme',
        scopes: ['playbook:read'],
        expiresAt: new Date(Date.now() + 8 * DAY_MS).toISOString(),
      });
      const expiresAt = new Date(Date.now() + 6 * DAY_MS).toISOString();
      await backend.databases.primary
        .updateTable('api_keys')
        .set({ expires_at: expiresAt })
        .where('id', '=', key.id)
        .execute();
      expect(await instance.services.identity.expiryNotices.sweep()).toBe(1);
      await waitFor('the expiry notice delivered', () => receiver.at('/expiring').length === 1);
      const event = JSON.parse(receiver.at('/expiring')[0]!.body) as { type: string; data: unknown };
      expect(event.type).toBe('api_key.expiring');
      expect(JSON.stringify(event)).toContain(key.id);
      expect(JSON.stringify(event)).not.toContain(key.key);
    } finally {
      await instance.close();
      await receiver.close();
    }
  });
});
