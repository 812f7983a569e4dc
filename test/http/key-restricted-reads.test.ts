import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KeyRestrictionsInput } from '../../src/schemas/identity.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { importService, listAll, resourceFile, syncRequest, syncToEnd } from '../helpers/sync-feed.js';

/**
 * D32 on both stacks: a Catalog outside a key's `catalogs` is invisible to it exactly as another
 * account's is, on every read and write route and in the sync feed, whatever was read before.
 */

type Headers = Record<string, string>;

interface Ids {
  readonly resources: Record<string, string>;
  readonly versions: Record<string, string>;
}

describe('a key restricted to some Catalogs (D32)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let writer: Headers;
  let ada: Headers;
  /** Restricted to org/runbooks and svc/guides, reading and writing. */
  let restricted: Headers;
  let restrictedId: string;
  const ids: Ids = { resources: {}, versions: {} };

  const mint = async (restrictions: KeyRestrictionsInput) => {
    const key = await identity.mintKey({
      accountId: 'acme',
      scopes: ['playbook:read', 'playbook:write'],
      restrictions,
    });
    return { id: key.id, headers: key.headers as Headers };
  };
  const get = (url: string, headers: Headers) => app.inject({ url, headers });
  const restrict = async (keyId: string, restrictions: KeyRestrictionsInput | null) => {
    const response = await app.inject({
      method: 'PATCH',
      url: `/v3/identity/api-keys/${keyId}`,
      headers: ada,
      payload: { restrictions },
    });
    expect(response.statusCode, response.body).toBe(200);
  };
  const publish = async (slug: string, resources: string[], headers = writer) => {
    const response = await app.inject({
      method: 'PUT',
      url: `/v3/playbook/catalogs/org/${slug}`,
      headers,
      payload: { name: slug, version: '1', resources: resources.map((r) => publishedResource(r)) },
    });
    expect(response.statusCode, response.body).toBeLessThan(300);
  };
  /** What a read that is not there answers: its status and code. */
  const absence = (response: { statusCode: number; json: () => { code: string; detail: string } }) => ({
    status: response.statusCode,
    code: response.json().code,
  });

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    ada = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
    writer = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    await importService(backend, identity, {
      guides: {
        catalog: { name: 'Guides', version: '1', facets: { capability: ['ops'] } },
        resources: { intro: resourceFile('intro') },
      },
      extra: {
        catalog: { name: 'Extra', version: '1', facets: { capability: ['ops'] } },
        resources: { tips: resourceFile('tips') },
      },
    });
    await publish('runbooks', ['deploy', 'rollback']);
    await publish('handbook', ['welcome']);
    const globex = await identity.mintKey({
      accountId: 'globex',
      scopes: ['playbook:read', 'playbook:write'],
    });
    await publish('runbooks', ['theirs'], globex.headers);
    const [theirs] = await listAll(app, globex.headers, '/v3/playbook/catalogs/org/runbooks/resources');
    ids.resources['globex/runbooks/theirs'] = theirs!.id as string;
    ids.versions['globex/runbooks/theirs'] = (theirs!.currentVersion as { id: string }).id;
    const all = await listAll(app, writer, '/v3/playbook/catalogs');
    for (const catalog of all) {
      const path = `/v3/playbook/catalogs/${catalog.owner}/${catalog.slug}/resources`;
      for (const resource of await listAll(app, writer, path)) {
        const name = `${catalog.owner}/${catalog.slug}/${resource.slug}`;
        ids.resources[name] = resource.id as string;
        ids.versions[name] = (resource.currentVersion as { id: string }).id;
      }
    }
    const key = await mint({ catalogs: ['org/runbooks', 'svc/guides'] });
    restricted = key.headers;
    restrictedId = key.id;
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  /** Every read of one Resource, by its ref `owner/catalog/slug`. */
  const readsOf = (ref: string) => {
    const [owner, catalog, slug] = ref.split('/');
    const id = ids.resources[ref]!;
    return [
      `/v3/playbook/catalogs/${owner}/${catalog}`,
      `/v3/playbook/catalogs/${owner}/${catalog}/resources`,
      `/v3/playbook/catalogs/${owner}/${catalog}/resources/${slug}`,
      `/v3/playbook/resources/${id}`,
      `/v3/playbook/resources/${id}/versions`,
      `/v3/playbook/resources/${id}/versions/${ids.versions[ref]}`,
    ];
  };

  it('lists only the Catalogs it names, and meta.total counts them alone', async () => {
    // Read first by a key of the same account that sees everything: nothing it was answered is shared.
    const everything = await get('/v3/playbook/catalogs', writer);
    expect(everything.json().meta.total).toBe(4);
    const response = await get('/v3/playbook/catalogs', restricted);
    expect(response.statusCode).toBe(200);
    const body = response.json();
    expect(body.data.map((c: { humanRef: string }) => c.humanRef)).toEqual(['svc/guides', 'org/runbooks']);
    expect(body.meta).toEqual({ page: 1, pageSize: 20, pageCount: 1, total: 2 });
    const service = await get('/v3/playbook/catalogs?sourceScope=svc', restricted);
    expect(service.json().data.map((c: { slug: string }) => c.slug)).toEqual(['guides']);
    expect(service.json().meta.total).toBe(1);
    const ops = await get('/v3/playbook/catalogs?capability=ops', restricted);
    expect(ops.json().meta.total).toBe(1);
    const second = await get('/v3/playbook/catalogs?page=2&pageSize=1', restricted);
    expect(second.json().data.map((c: { slug: string }) => c.slug)).toEqual(['runbooks']);
    expect(second.json().meta.total).toBe(2);
  });

  it('reads what it names: lists, pages, details, versions, by-ref reads', async () => {
    for (const ref of ['org/runbooks/deploy', 'svc/guides/intro']) {
      for (const url of readsOf(ref)) {
        const response = await get(url, restricted);
        expect(response.statusCode, `${url}: ${response.body}`).toBe(200);
        expect(response.body).toBe((await get(url, writer)).body);
      }
    }
  });

  it("answers 404 for every read of a Catalog outside, exactly as for another account's", async () => {
    for (const ref of ['org/handbook/welcome', 'svc/extra/tips']) {
      // Read and held in memory for the key that sees it first.
      for (const url of readsOf(ref)) expect((await get(url, writer)).statusCode, url).toBe(200);
      for (const url of readsOf(ref)) {
        const response = await get(url, restricted);
        expect(absence(response), url).toEqual({ status: 404, code: 'not_found' });
      }
    }
    // Another account's Catalog of a slug the key names stays another account's.
    for (const url of readsOf('globex/runbooks/theirs').slice(3)) {
      expect(absence(await get(url, restricted)), url).toEqual({ status: 404, code: 'not_found' });
    }
    // Alike to the letter: a Resource outside and one that does not exist.
    const outside = await get(`/v3/playbook/resources/${ids.resources['org/handbook/welcome']}`, restricted);
    expect(outside.json().detail).toBe(`resource ${ids.resources['org/handbook/welcome']} not found`);
    const outsideRef = await get('/v3/playbook/catalogs/org/handbook/resources', restricted);
    const missingRef = await get('/v3/playbook/catalogs/org/nothing/resources', restricted);
    expect(outsideRef.json().detail.replace('handbook', 'X')).toBe(
      missingRef.json().detail.replace('nothing', 'X'),
    );
  });

  it('org/* names every Catalog of the account and none of the service', async () => {
    const { headers } = await mint({ catalogs: ['org/*'] });
    const catalogs = await get('/v3/playbook/catalogs', headers);
    expect(catalogs.json().data.map((c: { humanRef: string }) => c.humanRef)).toEqual([
      'org/handbook',
      'org/runbooks',
    ]);
    expect((await get(readsOf('svc/guides/intro')[3]!, headers)).statusCode).toBe(404);
    expect((await get(readsOf('org/handbook/welcome')[3]!, headers)).statusCode).toBe(200);
    const service = await mint({ catalogs: ['svc/*'] });
    const list = await get('/v3/playbook/catalogs', service.headers);
    expect(list.json().data.map((c: { humanRef: string }) => c.humanRef)).toEqual([
      'svc/extra',
      'svc/guides',
    ]);
  });

  it('a key restricted only by address or rate sees every Catalog', async () => {
    const { headers } = await mint({ rateLimit: { limit: 1000, windowSeconds: 60 } });
    expect((await get('/v3/playbook/catalogs', headers)).json().meta.total).toBe(4);
  });

  it('writes only the Catalogs it names: a write outside is 404, a dry run too, and nothing is written', async () => {
    const before = await get('/v3/playbook/catalogs/org/handbook', writer);
    const body = { name: 'handbook', version: '2', resources: [publishedResource('welcome')] };
    const { slug: _slug, ...resource } = publishedResource('new');
    const writes = [
      { method: 'PUT', url: '/v3/playbook/catalogs/org/handbook', payload: body },
      { method: 'PUT', url: '/v3/playbook/catalogs/org/handbook?dryRun=true', payload: body },
      { method: 'PUT', url: '/v3/playbook/catalogs/org/brand-new', payload: body },
      { method: 'PUT', url: '/v3/playbook/catalogs/org/handbook/resources/new', payload: resource },
      { method: 'POST', url: '/v3/playbook/catalogs/org/handbook/versions', payload: { version: '9' } },
      { method: 'DELETE', url: '/v3/playbook/catalogs/org/handbook/resources/welcome' },
      { method: 'DELETE', url: '/v3/playbook/catalogs/org/handbook' },
    ] as const;
    for (const write of writes) {
      const response = await app.inject({ ...write, headers: restricted });
      expect(absence(response), `${write.method} ${write.url}`).toEqual({ status: 404, code: 'not_found' });
    }
    expect((await get('/v3/playbook/catalogs/org/brand-new', writer)).statusCode).toBe(404);
    expect((await get('/v3/playbook/catalogs/org/handbook', writer)).body).toBe(before.body);
    const inside = await app.inject({
      method: 'PUT',
      url: '/v3/playbook/catalogs/org/runbooks/resources/new',
      headers: restricted,
      payload: resource,
    });
    expect(inside.statusCode, inside.body).toBe(201);
  });

  it('its sync never names a Catalog outside, not even when one changes or leaves', async () => {
    const { headers } = await mint({ catalogs: ['org/runbooks', 'svc/guides'] });
    const initial = await syncToEnd(app, headers);
    const open = await syncToEnd(app, writer);
    const catalogRefs = initial.items.flatMap((item) =>
      item.catalog ? [`${item.catalog.owner}/${item.catalog.slug}`] : [],
    );
    expect(catalogRefs.sort()).toEqual(['org/runbooks', 'svc/guides']);
    const outsideIds = new Set([ids.resources['org/handbook/welcome'], ids.resources['svc/extra/tips']]);
    expect(initial.items.some((item) => outsideIds.has(item.resource?.id ?? ''))).toBe(false);
    // Changes outside (a new Resource, then the Catalog archived), and one inside.
    await app.inject({
      method: 'PUT',
      url: '/v3/playbook/catalogs/org/handbook/resources/later',
      headers: writer,
      payload: (({ slug: _s, ...rest }) => rest)(publishedResource('later')),
    });
    await app.inject({ method: 'DELETE', url: '/v3/playbook/catalogs/org/handbook', headers: writer });
    await importService(backend, identity, {
      guides: {
        catalog: { name: 'Guides', version: '1', facets: { capability: ['ops'] } },
        resources: { intro: resourceFile('intro') },
      },
      extra: {
        catalog: { name: 'Extra', version: '1', status: 'draft' },
        resources: { tips: resourceFile('tips') },
      },
    });
    await app.inject({
      method: 'PUT',
      url: '/v3/playbook/catalogs/org/runbooks/resources/inside',
      headers: writer,
      payload: (({ slug: _s, ...rest }) => rest)(publishedResource('inside')),
    });
    const delta = await syncToEnd(app, headers, { syncToken: initial.syncToken });
    const named = delta.items.map(
      (item) => item.resource?.slug ?? item.catalog?.slug ?? `${item.entity}:${item.id}`,
    );
    expect(named).toEqual(['inside']);
    // A key of the same account that is not restricted is told of all of it.
    const told = await syncToEnd(app, writer, { syncToken: open.syncToken });
    expect(
      told.items.map((item) => item.resource?.slug ?? item.catalog?.slug ?? `${item.entity}`).sort(),
    ).toEqual(['catalog', 'handbook', 'inside', 'later']);
  });

  it('a position made before its restrictions changed answers 410 sync_token_expired', async () => {
    const { id, headers } = await mint({ catalogs: ['org/runbooks'] });
    const { syncToken } = await syncToEnd(app, headers);
    const first = await syncRequest(app, headers, { pageSize: 1 });
    const pageToken = first.json().nextPageToken as string;
    await restrict(id, { catalogs: ['org/runbooks', 'org/handbook'] });
    for (const query of [{ syncToken }, { pageToken }]) {
      const response = await syncRequest(app, headers, query);
      expect(response.statusCode, response.body).toBe(410);
      expect(response.json().code).toBe('sync_token_expired');
      expect(response.json().detail).toContain('restrictions changed');
    }
    // A position of an unrestricted key is not one of a restricted view either.
    const open = await syncToEnd(app, writer);
    expect((await syncRequest(app, headers, { syncToken: open.syncToken })).statusCode).toBe(410);
  });

  it('applies a change of its restrictions at once, on the instance that made it', async () => {
    const handbook = `/v3/playbook/resources/${ids.resources['org/handbook/welcome']}`;
    expect((await get(handbook, restricted)).statusCode).toBe(404);
    await restrict(restrictedId, { catalogs: ['org/*'] });
    expect((await get(handbook, restricted)).statusCode).toBe(200);
    expect((await get('/v3/playbook/catalogs', restricted)).json().meta.total).toBe(2);
    await restrict(restrictedId, null);
    expect((await get('/v3/playbook/catalogs', restricted)).json().meta.total).toBeGreaterThan(2);
    await restrict(restrictedId, { catalogs: ['org/runbooks', 'svc/guides'] });
    expect((await get(handbook, restricted)).statusCode).toBe(404);
  });
});
