import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setAccount } from '../../src/accounts/accounts.js';
import { readHead } from '../../src/changes/change-log.js';
import { DeploymentKeys, loadDeploymentKeys } from '../../src/foundation/deployment-key.js';
import { startMetricsServer } from '../../src/observability/metrics.js';
import { SyncTokens } from '../../src/sync/sync-tokens.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import {
  type CatalogTree,
  type Item,
  importService,
  listed,
  Mirror,
  type Page,
  resourceFile,
  syncRequest,
  syncToEnd,
} from '../helpers/sync-feed.js';

/**
 * D27 on both stacks: an initial sync sends what the lists show, a sync from a position what changed
 * since (each entity once, as it is now, at its last change; `removed` for what left the view), and a
 * position works for the caller it was made for only.
 */

const DAY_MS = 86_400_000;

/** The service's Catalogs every test starts from. */
function serviceCatalogs(
  overrides: Partial<Record<string, Partial<CatalogTree>>> = {},
): Record<string, CatalogTree> {
  const base: Record<string, CatalogTree> = {
    handbook: {
      catalog: { name: 'Handbook', version: '1' },
      resources: {
        intro: resourceFile('intro'),
        faq: resourceFile('faq'),
        wip: resourceFile('wip', { status: 'draft' }),
      },
    },
    drafts: {
      catalog: { name: 'Drafts', version: '1', status: 'draft' },
      resources: { hidden: resourceFile('hidden') },
    },
    old: {
      catalog: { name: 'Old', version: '1', status: 'archived' },
      resources: { gone: resourceFile('gone') },
    },
  };
  for (const [slug, tree] of Object.entries(overrides)) base[slug] = { ...base[slug]!, ...tree };
  return base;
}

describe('the sync feed (D27)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let acme: Record<string, string>;
  let writer: Record<string, string>;
  let globexWriter: Record<string, string>;
  let nobody: Record<string, string>;

  const put = (url: string, payload: Record<string, unknown>, headers = writer) =>
    app.inject({ method: 'PUT', url, headers, payload });
  const putResource = (
    catalog: string,
    slug: string,
    overrides: Record<string, unknown> = {},
    headers = writer,
  ) => {
    const { slug: _slug, ...body } = publishedResource(slug, overrides);
    return put(`/v3/playbook/catalogs/org/${catalog}/resources/${slug}`, body, headers);
  };

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    acme = (await identity.mintKey({ accountId: 'acme' })).headers;
    writer = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    globexWriter = (
      await identity.mintKey({ accountId: 'globex', scopes: ['playbook:read', 'playbook:write'] })
    ).headers;
    nobody = await identity.tokenHeaders({ user: 'reader', accounts: [] });
    await importService(backend, identity, serviceCatalogs());
    const made = await put('/v3/playbook/catalogs/org/mine', {
      name: 'Mine',
      version: '1',
      resources: [
        publishedResource('a'),
        publishedResource('b'),
        publishedResource('c', { status: 'draft' }),
      ],
    });
    expect(made.statusCode, made.body).toBe(201);
    const theirs = await put(
      '/v3/playbook/catalogs/org/theirs',
      { name: 'Theirs', version: '1', resources: [publishedResource('x')] },
      globexWriter,
    );
    expect(theirs.statusCode, theirs.body).toBe(201);
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  /** The caller's copy after an initial sync, and the position it ends at. */
  async function mirrorOf(headers: Record<string, string>, pageSize?: number) {
    const mirror = new Mirror();
    const synced = await syncToEnd(app, headers, pageSize ? { pageSize } : {});
    mirror.apply(synced.items);
    return { mirror, syncToken: synced.syncToken, synced };
  }

  /** The copy equals what the lists show the caller now. */
  async function expectCurrent(mirror: Mirror, headers: Record<string, string>) {
    const lists = await listed(app, headers);
    expect(mirror.catalogs).toEqual(lists.catalogs);
    expect(mirror.resources).toEqual(lists.resources);
  }

  const label = (item: Item) =>
    item.type === 'removed'
      ? `removed ${item.entity} ${item.id}`
      : `${item.type} ${item.catalog?.slug ?? item.resource?.slug}`;

  it('an initial sync sends every Catalog and Resource the caller sees, as the lists show them, in pages of pageSize', async () => {
    const { mirror, synced } = await mirrorOf(acme, 2);
    await expectCurrent(mirror, acme);
    // The service's active and archived Catalogs and the account's own, never a service draft or another account's.
    expect([...mirror.catalogs.values()].map((catalog) => `${catalog.owner}/${catalog.slug}`).sort()).toEqual(
      ['org/mine', 'svc/handbook', 'svc/old'],
    );
    expect([...mirror.resources.values()].map((resource) => resource.humanRef).sort()).toEqual([
      'org/mine/a',
      'org/mine/b',
      'org/mine/c',
      'svc/handbook/faq',
      'svc/handbook/intro',
      'svc/old/gone',
    ]);
    // Catalogs first, in the list's order, then their Resources Catalog by Catalog, by slug.
    expect(synced.items.map(label)).toEqual([
      'catalog handbook',
      'catalog old',
      'catalog mine',
      'resource faq',
      'resource intro',
      'resource gone',
      'resource a',
      'resource b',
      'resource c',
    ]);
    for (const page of synced.pages) expect(page.data.length).toBeLessThanOrEqual(2);
    expect(synced.pages).toHaveLength(5);
    // Catalogs come with their current version and pins, as in the Catalogs list.
    expect(mirror.catalogs.get([...mirror.catalogs.keys()][0]!)).toHaveProperty(
      'currentVersion.resourcePins',
    );

    // A caller with no account sees the service's alone; the default page holds everything here.
    const alone = await mirrorOf(nobody);
    await expectCurrent(alone.mirror, nobody);
    expect(alone.synced.pages).toHaveLength(1);
    expect([...alone.mirror.catalogs.values()].every((catalog) => catalog.owner === 'svc')).toBe(true);
  });

  it('from a position: what changed since, each entity once, at its last change, as it is now', async () => {
    const { mirror, syncToken } = await mirrorOf(acme);
    expect((await putResource('mine', 'a', { version: '2', content: 'a two' })).statusCode).toBe(200);
    expect((await putResource('mine', 'b', { version: '2', content: 'b two' })).statusCode).toBe(200);
    expect((await putResource('mine', 'a', { version: '3', content: 'a three' })).statusCode).toBe(200);
    const delta = await syncToEnd(app, acme, { syncToken });
    expect(delta.items.map(label)).toEqual(['resource b', 'resource a']);
    expect(delta.items[1]?.resource).toMatchObject({ currentVersion: { version: '3' } });
    mirror.apply(delta.items);
    await expectCurrent(mirror, acme);
    // Nothing changed since: an empty page at the same position, the very same token.
    const again = await syncRequest(app, acme, { syncToken: delta.syncToken });
    expect(again.statusCode).toBe(200);
    expect(again.json()).toEqual({ data: [], nextSyncToken: delta.syncToken });
  });

  it("another account's writes are never sent: an empty page, at a position past them", async () => {
    const { syncToken } = await mirrorOf(acme);
    expect((await putResource('theirs', 'y', {}, globexWriter)).statusCode).toBe(201);
    const after = await syncRequest(app, acme, { syncToken });
    expect(after.statusCode).toBe(200);
    const page = after.json() as Page;
    expect(page.data).toEqual([]);
    // Asked again from there, still nothing; and what the account writes next is sent from it.
    const again = await syncRequest(app, acme, { syncToken: page.nextSyncToken! });
    expect(again.json()).toEqual({ data: [], nextSyncToken: page.nextSyncToken });
    expect((await putResource('theirs', 'z', {}, globexWriter)).statusCode).toBe(201);
    expect((await putResource('mine', 'd')).statusCode).toBe(201);
    const mine = await syncToEnd(app, acme, { syncToken: page.nextSyncToken! });
    expect(mine.items.map(label)).toEqual(['resource d']);
  });

  it('a service Catalog turned draft is removed, its Resources with it; back to active, they come back', async () => {
    const { mirror, syncToken } = await mirrorOf(acme);
    const handbookId = [...mirror.catalogs.values()].find((catalog) => catalog.slug === 'handbook')!.id;
    await importService(
      backend,
      identity,
      serviceCatalogs({ handbook: { catalog: { name: 'Handbook', version: '1', status: 'draft' } } }),
    );
    const hidden = await syncToEnd(app, acme, { syncToken });
    // The Catalog's removal stands for its Resources: none is named.
    expect(hidden.items).toEqual([{ type: 'removed', entity: 'catalog', id: handbookId }]);
    mirror.apply(hidden.items);
    await expectCurrent(mirror, acme);
    expect([...mirror.resources.values()].some((resource) => resource.catalogId === handbookId)).toBe(false);

    await importService(backend, identity, serviceCatalogs());
    const shown = await syncToEnd(app, acme, { syncToken: hidden.syncToken });
    expect(shown.items.map(label)).toEqual(['catalog handbook', 'resource faq', 'resource intro']);
    mirror.apply(shown.items);
    await expectCurrent(mirror, acme);
  });

  it('a service Catalog archived out of draft comes back with its Resources', async () => {
    const { mirror, syncToken } = await mirrorOf(acme);
    const catalog = (status: string) =>
      serviceCatalogs({ handbook: { catalog: { name: 'Handbook', version: '1', status } } });
    await importService(backend, identity, catalog('draft'));
    const hidden = await syncToEnd(app, acme, { syncToken });
    mirror.apply(hidden.items);
    await importService(backend, identity, catalog('archived'));
    const shown = await syncToEnd(app, acme, { syncToken: hidden.syncToken });
    expect(shown.items.map(label)).toEqual(['catalog handbook', 'resource faq', 'resource intro']);
    mirror.apply(shown.items);
    await expectCurrent(mirror, acme);
    await importService(backend, identity, catalog('active'));
    mirror.apply((await syncToEnd(app, acme, { syncToken: shown.syncToken })).items);
    await expectCurrent(mirror, acme);
  });

  it('a service Resource turned draft is removed; one made public is sent', async () => {
    const { mirror, syncToken } = await mirrorOf(acme);
    const faq = [...mirror.resources.values()].find((resource) => resource.humanRef === 'svc/handbook/faq')!;
    const handbook = (version: string, resources: CatalogTree['resources']) =>
      serviceCatalogs({ handbook: { catalog: { name: 'Handbook', version }, resources } });
    await importService(
      backend,
      identity,
      handbook('2', {
        intro: resourceFile('intro'),
        faq: resourceFile('faq', { status: 'draft' }),
        wip: resourceFile('wip', { version: '2' }),
      }),
    );
    const delta = await syncToEnd(app, acme, { syncToken });
    expect(delta.items.map(label).sort()).toEqual(
      ['catalog handbook', `removed resource ${faq.id}`, 'resource wip'].sort(),
    );
    mirror.apply(delta.items);
    await expectCurrent(mirror, acme);
    await importService(
      backend,
      identity,
      handbook('3', {
        intro: resourceFile('intro'),
        faq: resourceFile('faq'),
        wip: resourceFile('wip', { version: '3', status: 'draft' }),
      }),
    );
    mirror.apply((await syncToEnd(app, acme, { syncToken: delta.syncToken })).items);
    await expectCurrent(mirror, acme);
  });

  it('an account Catalog archived stays in view, archived', async () => {
    const { mirror, syncToken } = await mirrorOf(acme);
    const archived = await app.inject({
      method: 'DELETE',
      url: '/v3/playbook/catalogs/org/mine',
      headers: writer,
    });
    expect(archived.statusCode).toBe(204);
    const delta = await syncToEnd(app, acme, { syncToken });
    expect(delta.items.map(label)).toEqual(['catalog mine']);
    expect(delta.items[0]?.catalog).toMatchObject({ status: 'archived' });
    mirror.apply(delta.items);
    await expectCurrent(mirror, acme);
    const restored = await put('/v3/playbook/catalogs/org/mine', {
      name: 'Mine',
      version: '2',
      status: 'active',
      resources: [
        publishedResource('a', { version: '3', content: 'a three' }),
        publishedResource('b', { version: '2', content: 'b two' }),
        publishedResource('c', { status: 'draft' }),
      ],
    });
    expect(restored.statusCode, restored.body).toBe(200);
    mirror.apply((await syncToEnd(app, acme, { syncToken: delta.syncToken })).items);
    await expectCurrent(mirror, acme);
  });

  it('a change committed while an initial sync is read is not lost: the next sync sends it', async () => {
    const mirror = new Mirror();
    const first = await syncRequest(app, acme, { pageSize: 1 });
    const pages: Page[] = [first.json()];
    // Behind the cursor (a Catalog already sent), and ahead of it.
    expect((await putResource('mine', 'a', { version: '4', content: 'a four' })).statusCode).toBe(200);
    expect(
      (
        await put('/v3/playbook/catalogs/org/mine', {
          name: 'Mine, renamed while synced',
          version: '3',
          resources: [
            publishedResource('a', { version: '4', content: 'a four' }),
            publishedResource('b', { version: '2', content: 'b two' }),
            publishedResource('c', { status: 'draft' }),
          ],
        })
      ).statusCode,
    ).toBe(200);
    while (pages.at(-1)!.nextPageToken) {
      const next = await syncRequest(app, acme, { pageToken: pages.at(-1)!.nextPageToken!, pageSize: 1 });
      expect(next.statusCode, next.body).toBe(200);
      pages.push(next.json());
    }
    for (const page of pages) mirror.apply(page.data);
    const delta = await syncToEnd(app, acme, { syncToken: pages.at(-1)!.nextSyncToken! });
    expect(delta.items.map(label)).toEqual(expect.arrayContaining(['catalog mine', 'resource a']));
    mirror.apply(delta.items);
    await expectCurrent(mirror, acme);
  });

  it('refuses a query it cannot answer, naming the parameter', async () => {
    const { syncToken, synced } = await mirrorOf(acme, 1);
    const pageToken = synced.pages[0]!.nextPageToken!;
    const cases: [Record<string, string | number>, string][] = [
      [{ syncToken, pageToken }, 'pageToken'],
      [{ wait: 5 }, 'wait'],
      [{ pageToken, wait: 5 }, 'wait'],
      [{ pageSize: 0 }, 'pageSize'],
      [{ pageSize: 101 }, 'pageSize'],
      [{ syncToken, wait: 61 }, 'wait'],
      [{ syncToken, wait: 1.5 }, 'wait'],
      [{ syncToken: 'not a token!' }, 'syncToken'],
      [{ since: 1 }, 'since'],
    ];
    for (const [query, name] of cases) {
      const res = await syncRequest(app, acme, query);
      expect(res.statusCode, JSON.stringify(query)).toBe(400);
      expect(res.json()).toMatchObject({ code: 'invalid_request' });
      expect(res.json().errors, JSON.stringify(query)).toEqual(
        expect.arrayContaining([expect.objectContaining({ in: 'query', name })]),
      );
    }
  });

  it('takes playbook:read, from an API key or an access token', async () => {
    expect((await app.inject({ url: '/v3/playbook/sync' })).statusCode).toBe(401);
    const writeOnly = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:write'] })).headers;
    const refused = await app.inject({ url: '/v3/playbook/sync', headers: writeOnly });
    expect(refused.statusCode).toBe(403);
    const token = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
    const { mirror } = await mirrorOf(token);
    await expectCurrent(mirror, acme);
  });

  it('answers with a validator: asked again with If-None-Match, 304', async () => {
    const { syncToken } = await mirrorOf(acme);
    const first = await syncRequest(app, acme, { syncToken });
    const etag = first.headers.etag as string;
    expect(etag).toMatch(/^"/);
    expect(first.headers['cache-control']).toBe('private, no-cache');
    const again = await app.inject({
      url: `/v3/playbook/sync?syncToken=${syncToken}`,
      headers: { ...acme, 'if-none-match': etag },
    });
    expect(again.statusCode).toBe(304);
  });

  it('answers HEAD as GET, with the same status and headers and no body (D11)', async () => {
    const { syncToken } = await mirrorOf(acme);
    const url = `/v3/playbook/sync?syncToken=${syncToken}`;
    const get = await app.inject({ url, headers: acme });
    const head = await app.inject({ method: 'HEAD', url, headers: acme });
    expect(head.statusCode).toBe(200);
    expect(head.body).toBe('');
    expect(head.headers.etag).toBe(get.headers.etag);
    expect(head.headers['content-type']).toBe(get.headers['content-type']);
    const refused = await app.inject({
      method: 'HEAD',
      url: '/v3/playbook/sync?syncToken=damaged',
      headers: acme,
    });
    expect(refused.statusCode).toBe(400);
    expect(refused.body).toBe('');
  });

  it('counts the pages it serves by kind: initial, delta, empty', async () => {
    // Counted once the metrics listener is open, as in a deployment.
    const listener = await startMetricsServer(identity.metrics, { port: 0, host: '127.0.0.1' });
    const count = async (kind: string) =>
      Number(
        new RegExp(`^playbook_sync_pages_total\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(
          await (await fetch(`${listener.address}/metrics`)).text(),
        )?.[1] ?? 0,
      );
    const before = {
      initial: await count('initial'),
      delta: await count('delta'),
      empty: await count('empty'),
    };
    const { synced, syncToken } = await mirrorOf(acme, 4);
    expect((await syncRequest(app, acme, { syncToken })).statusCode).toBe(200);
    expect((await putResource('mine', 'counted')).statusCode).toBe(201);
    expect((await syncRequest(app, acme, { syncToken })).json().data).toHaveLength(1);
    expect(await count('initial')).toBe(before.initial + synced.pages.length);
    expect(await count('empty')).toBe(before.empty + 1);
    expect(await count('delta')).toBe(before.delta + 1);
    await listener.close();
  });

  describe('positions are bound to the view they were made for', () => {
    it("another account's position is 400 invalid_sync_token, as a sync or a page position", async () => {
      const globex = (await identity.mintKey({ accountId: 'globex' })).headers;
      const { syncToken, synced } = await mirrorOf(acme, 1);
      for (const query of [{ syncToken }, { pageToken: synced.pages[0]!.nextPageToken! }]) {
        const res = await syncRequest(app, globex, query);
        expect(res.statusCode).toBe(400);
        expect(res.json()).toMatchObject({ code: 'invalid_sync_token', title: 'Invalid sync token' });
        expect(res.json().detail).toMatch(/another account/);
        // A caller acting for no account cannot carry an account's position either.
        expect((await syncRequest(app, nobody, query)).json()).toMatchObject({ code: 'invalid_sync_token' });
      }
    });

    it('a forged or damaged position is 400 invalid_sync_token', async () => {
      const { syncToken } = await mirrorOf(acme);
      const bytes = Buffer.from(syncToken, 'base64url');
      const flipped = Buffer.from(bytes);
      flipped[flipped.length - 20]! ^= 1;
      const otherKey = Buffer.from(bytes);
      otherKey[2]! ^= 1;
      for (const forged of [
        randomBytes(60).toString('base64url'),
        flipped.toString('base64url'),
        otherKey.toString('base64url'),
        syncToken.slice(0, -4),
        `${syncToken}AAAA`,
      ]) {
        const res = await syncRequest(app, acme, { syncToken: forged });
        expect(res.statusCode, forged).toBe(400);
        expect(res.json()).toMatchObject({ code: 'invalid_sync_token' });
        expect(res.json().errors).toEqual([expect.objectContaining({ in: 'query', name: 'syncToken' })]);
      }
    });

    it("a position sealed by another deployment's key is 400 invalid_sync_token; the same one sealed here is served", async () => {
      const seq = await readHead(backend.databases.reader);
      const position = {
        kind: 'sync',
        view: { accountId: 'acme', plan: 'free', restrictions: null },
        seq,
      } as const;
      const config = identity.config;
      const ours = new SyncTokens(
        await loadDeploymentKeys({
          dataDir: config.dataDir,
          databaseKind: config.database.kind,
          ...(config.deploymentKeys ? { keys: config.deploymentKeys } : {}),
        }),
      );
      expect((await syncRequest(app, acme, { syncToken: ours.seal(position) })).statusCode).toBe(200);
      const theirs = new SyncTokens(new DeploymentKeys([randomBytes(32)]));
      const pageToken = theirs.seal({ ...position, kind: 'initial', cursor: { phase: 'catalogs' } });
      for (const query of [{ syncToken: theirs.seal(position) }, { pageToken }]) {
        const res = await syncRequest(app, acme, query);
        expect(res.statusCode).toBe(400);
        expect(res.json()).toMatchObject({ code: 'invalid_sync_token' });
        expect(res.json().detail).toMatch(/was not made by this deployment/);
      }
    });

    it('a page position given as a sync position, or the reverse, is 400 invalid_sync_token', async () => {
      const { syncToken, synced } = await mirrorOf(acme, 1);
      const pageToken = synced.pages[0]!.nextPageToken!;
      const asSync = await syncRequest(app, acme, { syncToken: pageToken });
      expect(asSync.statusCode).toBe(400);
      expect(asSync.json()).toMatchObject({ code: 'invalid_sync_token', errors: [{ name: 'syncToken' }] });
      expect(asSync.json().detail).toMatch(/send it as pageToken/);
      const asPage = await syncRequest(app, acme, { pageToken: syncToken });
      expect(asPage.statusCode).toBe(400);
      expect(asPage.json()).toMatchObject({ code: 'invalid_sync_token', errors: [{ name: 'pageToken' }] });
    });

    it("a position made before the account's plan changed is 410 sync_token_expired; a fresh sync works", async () => {
      await givenAccount(backend.databases.primary, 'initech', 'pro');
      const pro = (await identity.mintKey({ accountId: 'initech' })).headers;
      const { syncToken, synced } = await mirrorOf(pro, 1);
      await setAccount(identity.writes, 'initech', { plan: 'free' });
      // A key verified after the change acts on the plan the account has now.
      const downgraded = (await identity.mintKey({ accountId: 'initech' })).headers;
      for (const query of [{ syncToken }, { pageToken: synced.pages[0]!.nextPageToken! }]) {
        const res = await syncRequest(app, downgraded, query);
        expect(res.statusCode).toBe(410);
        expect(res.json()).toMatchObject({ code: 'sync_token_expired', title: 'Sync token expired' });
        expect(res.json().detail).toMatch(/plan changed/);
      }
      const { mirror } = await mirrorOf(downgraded);
      await expectCurrent(mirror, downgraded);
    });
  });

  describe('how far back a position reaches', () => {
    let later: FastifyInstance;
    let now = Date.now();

    beforeAll(async () => {
      // The same service, its clock free to move: the retention is 30 days by default.
      later = await buildIdentityApp(backend, identity, undefined, { sync: { now: () => now } });
    });
    afterAll(async () => {
      await later.close();
    });

    it('a position whose next change is older than the retention is 410; a current one is served however old', async () => {
      const { syncToken: behind } = await mirrorOf(acme);
      expect((await putResource('mine', 'a', { version: '5', content: 'a five' })).statusCode).toBe(200);
      const { syncToken: current } = await mirrorOf(acme);
      expect(await readHead(backend.databases.reader)).toBeGreaterThan(0);
      now = Date.now() + 29 * DAY_MS;
      expect((await syncRequest(later, acme, { syncToken: behind })).statusCode).toBe(200);
      now = Date.now() + 31 * DAY_MS;
      const expired = await syncRequest(later, acme, { syncToken: behind });
      expect(expired.statusCode).toBe(410);
      expect(expired.json()).toMatchObject({ code: 'sync_token_expired' });
      expect(expired.json().detail).toMatch(/older than the change log keeps \(30 days\)/);
      expect(expired.json().errors).toBeUndefined();
      // Nothing happened since: the log reaches back to it, however long ago it was made.
      const fresh = await syncRequest(later, acme, { syncToken: current });
      expect(fresh.statusCode).toBe(200);
      expect(fresh.json()).toEqual({ data: [], nextSyncToken: current });
    });
  });
});
