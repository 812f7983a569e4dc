import http from 'node:http';
import { performance } from 'node:perf_hooks';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import type { SyncParts } from '../helpers/sync.js';
import { type Page, syncRequest, syncToEnd } from '../helpers/sync-feed.js';
import { waitFor } from '../helpers/wait.js';

/**
 * D27's held requests, on both stacks: `wait` holds a request until a change of the caller's
 * namespaces (answered within a second of it), or answers empty at the end; a cap per instance (503
 * with Retry-After past it; the shares of each credential and account are in
 * sync-held-shares.test.ts); every held request answered at once when the app closes; a client that
 * goes away frees its place at once; and no held request keeps a database connection from others.
 */

describe('held sync requests (D27)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let parts: SyncParts;
  let acme: Record<string, string>;
  let writer: Record<string, string>;
  let globexWriter: Record<string, string>;
  let globex: Record<string, string>;
  let initech: Record<string, string>;
  let initechWriter: Record<string, string>;
  let published = 0;

  /** A new Resource in an account's Catalog: one change of that account's namespace. */
  const publish = (headers = writer, catalog = 'mine') => {
    const { slug, ...body } = publishedResource(`r${++published}`);
    return app.inject({
      method: 'PUT',
      url: `/v3/playbook/catalogs/org/${catalog}/resources/${slug}`,
      headers,
      payload: body,
    });
  };

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity, undefined, {
      sync: { maxHeld: 40, built: (built) => (parts = built) },
    });
    for (const account of ['acme', 'globex', 'initech'])
      await givenAccount(backend.databases.primary, account);
    acme = (await identity.mintKey({ accountId: 'acme' })).headers;
    globex = (await identity.mintKey({ accountId: 'globex' })).headers;
    initech = (await identity.mintKey({ accountId: 'initech' })).headers;
    initechWriter = (
      await identity.mintKey({ accountId: 'initech', scopes: ['playbook:read', 'playbook:write'] })
    ).headers;
    writer = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    globexWriter = (
      await identity.mintKey({ accountId: 'globex', scopes: ['playbook:read', 'playbook:write'] })
    ).headers;
    for (const [headers, slug] of [
      [writer, 'mine'],
      [globexWriter, 'theirs'],
      [initechWriter, 'others'],
    ] as const) {
      const res = await app.inject({
        method: 'PUT',
        url: `/v3/playbook/catalogs/org/${slug}`,
        headers,
        payload: { name: slug, version: '1', resources: [publishedResource('first')] },
      });
      expect(res.statusCode, res.body).toBe(201);
    }
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const current = async () => (await syncToEnd(app, acme)).syncToken;
  const held = (syncToken: string, wait: number, target = app) =>
    syncRequest(target, acme, { syncToken, wait }) as Promise<LightMyRequestResponse>;

  it('a held request is answered within a second of a change in its account, with that change', async () => {
    const syncToken = await current();
    const answer = held(syncToken, 20);
    await waitFor('the request is held', async () => parts.held.count === 1);
    const written = await publish();
    expect(written.statusCode).toBe(201);
    const committedAt = performance.now();
    const res = await answer;
    expect(performance.now() - committedAt).toBeLessThan(1000);
    expect(res.statusCode).toBe(200);
    const page = res.json() as Page;
    expect(page.data.map((item) => item.resource?.slug)).toEqual([`r${published}`]);
    expect(page.nextSyncToken).toBeDefined();
    expect(parts.held.count).toBe(0);
  });

  it("another account's change does not wake it: empty at the end of the wait, at the same position", async () => {
    const syncToken = await current();
    const started = performance.now();
    const answer = held(syncToken, 1);
    await waitFor('the request is held', async () => parts.held.count === 1);
    expect((await publish(globexWriter, 'theirs')).statusCode).toBe(201);
    const res = await answer;
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(990);
    expect(elapsed).toBeLessThan(2500);
    expect(res.statusCode).toBe(200);
    const page = res.json() as Page;
    expect(page.data).toEqual([]);
    // Nothing of the caller's changed: from the position it names, still nothing.
    expect((await syncRequest(app, acme, { syncToken: page.nextSyncToken! })).json()).toMatchObject({
      data: [],
    });

    // Where nothing changed at all, the very same token comes back.
    const quiet = await current();
    const again = await held(quiet, 1);
    expect(again.json()).toEqual({ data: [], nextSyncToken: quiet });
  });

  it('a position behind the log is answered at once, without holding; so is wait=0', async () => {
    const syncToken = await current();
    expect((await publish()).statusCode).toBe(201);
    const started = performance.now();
    const res = await held(syncToken, 30);
    expect(performance.now() - started).toBeLessThan(1000);
    expect((res.json() as Page).data).toHaveLength(1);
    const now = await current();
    const nothing = await held(now, 0);
    expect(nothing.json()).toEqual({ data: [], nextSyncToken: now });
  });

  /** `count` requests held: two accounts' worth, each within its share (20 of the 40 the app holds). */
  const holdAcross = async (count: number) => {
    const acmeToken = await current();
    const globexToken = (await syncToEnd(app, globex)).syncToken;
    const answers = Array.from({ length: count }, (_, i) =>
      i < 20
        ? held(acmeToken, 30)
        : (syncRequest(app, globex, { syncToken: globexToken, wait: 30 }) as Promise<LightMyRequestResponse>),
    );
    await waitFor(`${count} requests held`, async () => parts.held.count === count);
    return { answers, acmeToken };
  };

  it('past the cap, 503 unavailable with Retry-After; places free again as held requests are answered', async () => {
    const { answers, acmeToken } = await holdAcross(40);
    const initechToken = (await syncToEnd(app, initech)).syncToken;
    const refused = await syncRequest(app, initech, { syncToken: initechToken, wait: 30 });
    expect(refused.statusCode).toBe(503);
    expect(refused.headers['retry-after']).toBe('2');
    expect(refused.json()).toMatchObject({ code: 'unavailable' });
    expect(refused.json().detail).toMatch(/holds as many waiting sync requests as it may/);
    // A poll without wait is still answered.
    expect((await syncRequest(app, acme, { syncToken: acmeToken })).statusCode).toBe(200);
    const metrics = await identity.metrics.registry.metrics();
    expect(metrics).toMatch(/^playbook_sync_held_requests 40$/m);
    expect(metrics).toMatch(/^playbook_sync_held_refusals_total\{reason="instance"\} 1$/m);
    // One change in each account answers them all.
    expect((await publish()).statusCode).toBe(201);
    expect((await publish(globexWriter, 'theirs')).statusCode).toBe(201);
    for (const res of await Promise.all(answers)) {
      expect(res.statusCode).toBe(200);
      expect((res.json() as Page).data).toHaveLength(1);
    }
    expect(parts.held.count).toBe(0);
    expect(await identity.metrics.registry.metrics()).toMatch(/^playbook_sync_held_requests 0$/m);
  });

  it('no held request keeps a database connection: reads and writes go on while 30 are held', async () => {
    const { answers, acmeToken: syncToken } = await holdAcross(30);
    const started = performance.now();
    const read = await app.inject({
      url: '/v3/playbook/catalogs/org/mine/resources?pageSize=100',
      headers: acme,
    });
    expect(read.statusCode).toBe(200);
    expect((await syncRequest(app, acme, { syncToken })).statusCode).toBe(200);
    // A third account's write: it goes on, and wakes none of them.
    expect((await publish(initechWriter, 'others')).statusCode).toBe(201);
    expect(performance.now() - started).toBeLessThan(2000);
    expect(parts.held.count).toBe(30);
    expect((await publish()).statusCode).toBe(201);
    expect((await publish(globexWriter, 'theirs')).statusCode).toBe(201);
    await Promise.all(answers);
  });

  it('a held request whose client goes away is let go at once', async () => {
    let ownParts!: SyncParts;
    const served = await buildIdentityApp(backend, identity, undefined, {
      sync: { built: (built) => (ownParts = built) },
    });
    try {
      const base = await listenLocally(served);
      const syncToken = await current();
      const request = http.get(`${base}/v3/playbook/sync?syncToken=${syncToken}&wait=30`, { headers: acme });
      request.on('error', () => {});
      await waitFor('the request is held', async () => ownParts.held.count === 1);
      request.destroy();
      const started = performance.now();
      await waitFor('its place is free', async () => ownParts.held.count === 0, 1000);
      expect(performance.now() - started).toBeLessThan(500);
    } finally {
      await served.close();
    }
  });

  it('closing the app answers every held request at once, empty and at the same position', async () => {
    let ownParts!: SyncParts;
    const closing = await buildIdentityApp(backend, identity, undefined, {
      sync: { built: (built) => (ownParts = built) },
    });
    const syncToken = await current();
    const answers = Array.from({ length: 5 }, () => held(syncToken, 60, closing));
    await waitFor('5 requests held', async () => ownParts.held.count === 5);
    const started = performance.now();
    await closing.close();
    const results = await Promise.all(answers);
    expect(performance.now() - started).toBeLessThan(1000);
    for (const res of results) {
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ data: [], nextSyncToken: syncToken });
    }
  });
});
