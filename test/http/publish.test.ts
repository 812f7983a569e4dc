import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ContentStore } from '../../src/content/content-store.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource as resource } from '../helpers/publish-bodies.js';
import { sleep } from '../helpers/wait.js';
import { dumpStorage, sha256 } from '../import/support.js';

/**
 * D23: publishing over HTTP. Every operation, its refusals, its preconditions, what a failure leaves
 * behind, and the audit trail, on both stacks.
 */

const CATALOG = '/v3/playbook/catalogs/org/handbook';
const BIG = 'b'.repeat(70_000);

const catalogBody = (overrides: Record<string, unknown> = {}) => ({
  name: 'Handbook',
  version: '1',
  description: 'How we work',
  resources: [resource('intro'), resource('onboarding'), resource('big', { content: BIG })],
  ...overrides,
});

/** The tables and objects a publication writes: what "nothing written" compares. */
async function catalogData(backend: TestBackend) {
  const { tables, objects } = await dumpStorage(backend);
  const kept = [
    'catalogs',
    'catalog_versions',
    'catalog_version_pins',
    'catalog_facet_values',
    'resources',
    'resource_versions',
    'content_blobs',
    'changes',
    'data_generation',
  ];
  return { tables: Object.fromEntries(kept.map((name) => [name, tables[name]])), objects };
}

describe('publishing over HTTP (D23)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let writer: Record<string, string>;
  let writerKeyId: string;
  let reader: Record<string, string>;
  let stranger: Record<string, string>;
  let token: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    const minted = await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] });
    writer = minted.headers;
    writerKeyId = minted.id;
    reader = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read'] })).headers;
    stranger = (await identity.mintKey({ accountId: 'globex', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    token = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const put = (url: string, payload: unknown, headers: Record<string, string> = writer) =>
    app.inject({ method: 'PUT', url, headers, payload: payload as Record<string, unknown> });
  const read = (url: string, headers: Record<string, string> = reader) => app.inject({ url, headers });
  const resourcesOf = async (slug = 'handbook') =>
    (await read(`/v3/playbook/catalogs/org/${slug}/resources?pageSize=100`)).json() as {
      data: { slug: string; id: string; currentVersion?: { version: string } }[];
    };
  const problemOf = (answer: LightMyRequestResponse) => {
    expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
    return answer.json();
  };

  describe('PUT a whole Catalog', () => {
    it('201 creates it with a Catalog version pinning every active Resource, readable at once', async () => {
      const answer = await put(CATALOG, catalogBody());
      expect(answer.statusCode, answer.body).toBe(201);
      expect(answer.headers.etag).toMatch(/^"c[\w-]{32}"$/);
      expect(answer.headers['cache-control']).toBe('no-store');
      const report = answer.json();
      expect(report.changes).toEqual({ created: 3, updated: 0, superseded: 0, archived: 0, unchanged: 0 });
      expect(report.dryRun).toBe(false);
      expect(report.catalog).toMatchObject({
        owner: 'org',
        slug: 'handbook',
        name: 'Handbook',
        status: 'active',
      });
      expect(report.catalog.currentVersion).toMatchObject({ version: '1', resourceCount: 3 });
      const listed = await resourcesOf();
      expect(listed.data.map((r) => r.slug)).toEqual(['big', 'intro', 'onboarding']);
      const pins = report.catalog.currentVersion.resourcePins as {
        resourceId: string;
        contentHash: string;
      }[];
      expect(new Set(pins.map((pin) => pin.resourceId))).toEqual(new Set(listed.data.map((r) => r.id)));
      expect(pins.find((pin) => pin.contentHash === sha256(BIG))).toBeDefined();
      const big = listed.data.find((r) => r.slug === 'big')!;
      const detail = (await read(`/v3/playbook/resources/${big.id}`)).json();
      expect(detail.currentVersion).toMatchObject({ storageBackend: 'object-storage', content: BIG });
    });

    it('writes nothing for the same body twice, and answers 200 with the same ETag', async () => {
      const first = await put(CATALOG, catalogBody());
      const before = await catalogData(backend);
      const again = await put(CATALOG, catalogBody());
      expect(again.statusCode).toBe(200);
      expect(again.json().changes).toEqual({
        created: 0,
        updated: 0,
        superseded: 0,
        archived: 0,
        unchanged: 3,
      });
      expect(again.headers.etag).toBe(first.headers.etag);
      expect(await catalogData(backend)).toEqual(before);
    });

    it('dryRun=true reports the change and writes nothing, for a new Catalog and a changed one', async () => {
      const before = await catalogData(backend);
      const fresh = await put('/v3/playbook/catalogs/org/fresh?dryRun=true', catalogBody());
      expect(fresh.statusCode).toBe(200);
      expect(fresh.json()).toMatchObject({ dryRun: true, changes: { created: 3 } });
      expect(fresh.json().catalog).toBeUndefined();
      expect(fresh.headers.etag).toBeUndefined();
      const changed = await put(
        `${CATALOG}?dryRun=true`,
        catalogBody({ version: '2', resources: [resource('intro', { version: '1.1.0', content: 'new' })] }),
      );
      expect(changed.statusCode).toBe(200);
      expect(changed.json().changes).toEqual({
        created: 0,
        updated: 1,
        superseded: 1,
        archived: 2,
        unchanged: 0,
      });
      expect(changed.json().lines).toContain('+ catalog version org/handbook 2: 1 pin (was 1)');
      expect(await catalogData(backend)).toEqual(before);
      expect((await read('/v3/playbook/catalogs/org/fresh/resources')).statusCode).toBe(404);
    });

    it("answers with the bytes of the whole report serialized at once, its Catalog's as a read of it sends them, pins and all", async () => {
      // Another account than the audit trail's below, which this write's 1,500 Resources would crowd.
      const MANY = '/v3/playbook/catalogs/org/many';
      const resources = Array.from({ length: 1_500 }, (_, i) => resource(`r-${i}`));
      const body = { name: 'Many "resourcePins":[] ✓', version: '1', resources };
      /** The report's text with its Catalog's as a read of the Catalog by its ref sends it. */
      const expectedOf = async (answer: LightMyRequestResponse, withCatalog: boolean) => {
        const { changes, dryRun, lines } = answer.json() as Record<string, unknown>;
        const rest = JSON.stringify({ changes, dryRun, lines });
        if (!withCatalog) return rest;
        const byRef = await read(MANY, stranger);
        expect(byRef.statusCode).toBe(200);
        return `{"catalog":${byRef.body},${rest.slice(1)}`;
      };
      const fresh = await put(`${MANY}?dryRun=true`, body, stranger);
      expect(fresh.statusCode, fresh.body).toBe(200);
      expect(fresh.body).toBe(await expectedOf(fresh, false));
      const created = await put(MANY, body, stranger);
      expect(created.statusCode, created.body).toBe(201);
      expect(created.json().catalog.currentVersion.resourcePins).toHaveLength(1_500);
      expect(created.json().lines.length).toBeGreaterThan(1_500);
      expect(created.body).toBe(await expectedOf(created, true));
      // A dry run answers with the Catalog as it is stored, pins and all.
      const changed = await put(
        `${MANY}?dryRun=true`,
        { ...body, version: '2', resources: resources.slice(1) },
        stranger,
      );
      expect(changed.statusCode, changed.body).toBe(200);
      expect(changed.json().catalog.currentVersion).toMatchObject({ version: '1', resourceCount: 1_500 });
      expect(changed.body).toBe(await expectedOf(changed, true));
    }, 60_000);

    it('409 version_label_taken for changed content under an old label, writing nothing', async () => {
      const before = await catalogData(backend);
      const answer = await put(
        CATALOG,
        catalogBody({
          version: '2',
          resources: [
            resource('intro', { content: 'changed' }),
            resource('onboarding'),
            resource('big', { content: BIG }),
          ],
        }),
      );
      expect(answer.statusCode).toBe(409);
      const problem = problemOf(answer);
      expect(problem.code).toBe('version_label_taken');
      expect(problem.detail).toContain('resources[');
      expect(problem.detail).toContain('content changed but the version "1.0.0" did not');
      // The planner's refusal, said in the body's terms: the JSON path of the field at fault.
      expect(problem.errors).toEqual([
        {
          in: 'body',
          name: 'resources[0].version',
          message: expect.stringContaining('content changed but the version "1.0.0" did not'),
        },
      ]);
      expect(await catalogData(backend)).toEqual(before);
    });

    it('400 naming the field: resources[i].content, a repeated slug, an unknown field, content over the limit', async () => {
      const cases: [unknown, string][] = [
        [
          catalogBody({ resources: [resource('a'), { ...resource('b'), content: undefined }] }),
          'resources[1].content',
        ],
        [catalogBody({ resources: [resource('a'), resource('b'), resource('a')] }), 'resources[2].slug'],
        [catalogBody({ resources: [resource('a', { colour: 'red' })] }), 'resources[0].colour'],
        [catalogBody({ resources: [resource('Not A Slug')] }), 'resources[0].slug'],
        [catalogBody({ version: undefined }), 'version'],
        [
          catalogBody({ resources: [resource('a', { content: 'x'.repeat(16 * 1024 * 1024 + 1) })] }),
          'resources[0].content',
        ],
      ];
      for (const [payload, name] of cases) {
        const answer = await put('/v3/playbook/catalogs/org/invalid', payload);
        expect(answer.statusCode, name).toBe(400);
        expect(
          problemOf(answer).errors.map((e: { name: string }) => e.name),
          name,
        ).toContain(name);
      }
      expect((await read('/v3/playbook/catalogs/org/invalid/resources')).statusCode).toBe(404);
    });

    it('412 for a stale If-Match, 200 for the current one; If-None-Match: * only creates', async () => {
      const current = (await put(CATALOG, catalogBody())).headers.etag as string;
      const stale = await put(CATALOG, catalogBody({ name: 'Renamed' }), {
        ...writer,
        'if-match': '"c-stale"',
      });
      expect(stale.statusCode).toBe(412);
      expect(problemOf(stale)).toMatchObject({ code: 'precondition_failed' });
      // RFC 9110: If-Match compares strongly, so the weak form of the current tag does not hold.
      const weak = await put(CATALOG, catalogBody({ name: 'Renamed' }), {
        ...writer,
        'if-match': `W/${current}`,
      });
      expect(weak.statusCode).toBe(412);
      // A list whose first tag holds a comma is read as one tag, and the current one after it holds.
      const fresh = await put(CATALOG, catalogBody({ name: 'Renamed' }), {
        ...writer,
        'if-match': `"c-old,x", ${current}`,
      });
      expect(fresh.statusCode).toBe(200);
      expect(fresh.headers.etag).not.toBe(current);
      // The first write moved the ETag: a second one based on the old one is refused.
      const late = await put(CATALOG, catalogBody({ name: 'Late' }), { ...writer, 'if-match': current });
      expect(late.statusCode).toBe(412);
      expect((await put(CATALOG, catalogBody(), { ...writer, 'if-none-match': '*' })).statusCode).toBe(412);
      // RFC 9110: If-None-Match with tags holds unless one names the current ETag (weakly).
      const now = fresh.headers.etag as string;
      const named = await put(CATALOG, catalogBody({ name: 'Renamed' }), {
        ...writer,
        'if-none-match': `"x", W/${now}`,
      });
      expect(named.statusCode).toBe(412);
      const other = await put(CATALOG, catalogBody({ name: 'Renamed' }), {
        ...writer,
        'if-none-match': '"x"',
      });
      expect(other.statusCode).toBe(200);
      const created = await put('/v3/playbook/catalogs/org/created-once', catalogBody(), {
        ...writer,
        'if-none-match': '*',
      });
      expect(created.statusCode).toBe(201);
      await put(CATALOG, catalogBody());
    });

    it('403 under svc, with a read-only key; 401 without a credential; a user token publishes', async () => {
      const svc = await put('/v3/playbook/catalogs/svc/handbook', catalogBody());
      expect(svc.statusCode).toBe(403);
      expect(problemOf(svc).detail).toContain('operators');
      const readOnly = await put(CATALOG, catalogBody(), reader);
      expect(readOnly.statusCode).toBe(403);
      expect(problemOf(readOnly).detail).toBe('this operation needs the playbook:write scope');
      expect((await put(CATALOG, catalogBody(), {})).statusCode).toBe(401);
      const byUser = await put('/v3/playbook/catalogs/org/from-a-user', catalogBody(), token);
      expect(byUser.statusCode).toBe(201);
    });

    it("cannot touch another account's Catalog: it writes its own, and finds none of ours (404)", async () => {
      const theirs = await put(CATALOG, catalogBody({ name: 'Globex handbook' }), stranger);
      expect(theirs.statusCode).toBe(201);
      expect((await read(CATALOG.replace('/org/', '/org/') + '/resources')).json().data).toHaveLength(3);
      const ours = await app.inject({
        method: 'GET',
        url: '/v3/playbook/catalogs?pageSize=100',
        headers: reader,
      });
      expect(ours.json().data.find((c: { slug: string }) => c.slug === 'handbook').name).toBe('Handbook');
      const archive = await app.inject({
        method: 'DELETE',
        url: '/v3/playbook/catalogs/org/from-a-user',
        headers: stranger,
      });
      expect(archive.statusCode).toBe(404);
    });
  });

  describe('one Resource, a Catalog version, archiving', () => {
    it('PUT a Resource creates or supersedes it without publishing a Catalog version; POST versions pins it', async () => {
      const url = `${CATALOG}/resources/runbook`;
      const created = await put(url, { ...resource('x'), slug: undefined });
      expect(created.statusCode, created.body).toBe(201);
      expect(created.headers.etag).toMatch(/^"r/);
      expect(created.json().catalog.currentVersion.version).toBe('1');
      const updated = await put(
        url,
        { ...resource('x', { version: '2.0.0', content: 'two' }), slug: undefined },
        {
          ...writer,
          'if-match': String(created.headers.etag),
        },
      );
      expect(updated.statusCode).toBe(200);
      expect(updated.json().changes).toMatchObject({ updated: 1, superseded: 1 });
      const taken = await put(url, {
        ...resource('x', { version: '2.0.0', content: 'other' }),
        slug: undefined,
      });
      expect(taken.statusCode).toBe(409);

      const version = () =>
        app.inject({
          method: 'POST',
          url: `${CATALOG}/versions`,
          headers: writer,
          payload: { version: '5' },
        });
      const published = await version();
      expect(published.statusCode, published.body).toBe(201);
      expect(published.json().currentVersion).toMatchObject({ version: '5', resourceCount: 4 });
      const listed = await resourcesOf();
      const runbook = listed.data.find((r) => r.slug === 'runbook')!;
      expect(published.json().currentVersion.resourcePins).toContainEqual(
        expect.objectContaining({ resourceId: runbook.id, version: '2.0.0' }),
      );
      expect((await version()).statusCode).toBe(200);
      await put(url, { ...resource('x', { version: '3.0.0', content: 'three' }), slug: undefined });
      const reused = await version();
      expect(reused.statusCode).toBe(409);
      expect(problemOf(reused).code).toBe('version_label_taken');
      expect(
        (await put('/v3/playbook/catalogs/org/nowhere/resources/a', { ...resource('x'), slug: undefined }))
          .statusCode,
      ).toBe(404);
    });

    it('DELETE archives a Resource and a Catalog, idempotently; unknown ones are 404', async () => {
      const drop = () =>
        app.inject({ method: 'DELETE', url: `${CATALOG}/resources/runbook`, headers: writer });
      expect((await drop()).statusCode).toBe(204);
      expect((await drop()).statusCode).toBe(204);
      const runbook = (await resourcesOf()).data.find((r) => r.slug === 'runbook') as unknown as {
        status: string;
      };
      expect(runbook.status).toBe('archived');
      const unknown = await app.inject({
        method: 'DELETE',
        url: `${CATALOG}/resources/nothing`,
        headers: writer,
      });
      expect(unknown.statusCode).toBe(404);
      const archive = () =>
        app.inject({ method: 'DELETE', url: '/v3/playbook/catalogs/org/created-once', headers: writer });
      expect((await archive()).statusCode).toBe(204);
      expect((await archive()).statusCode).toBe(204);
      const catalogs = (await read('/v3/playbook/catalogs?pageSize=100')).json().data as {
        slug: string;
        status: string;
      }[];
      expect(catalogs.find((c) => c.slug === 'created-once')?.status).toBe('archived');
    });
  });

  describe('the audit trail', () => {
    it('lists every write and key event newest first, with who did it and the request id', async () => {
      const write = await put(CATALOG, catalogBody({ version: 'audited', description: 'Audited' }));
      expect(write.statusCode, write.body).toBe(200);
      const events = await app.inject({
        url: '/v3/identity/audit-events?accountId=acme&pageSize=100',
        headers: token,
      });
      expect(events.statusCode).toBe(200);
      const data = events.json().data as {
        action: string;
        actor: { type: string; id?: string };
        requestId?: string;
        target: string;
        at: string;
      }[];
      // D26: one change per entity the write changed, the Catalog's version last, so first here.
      expect(data[0], JSON.stringify(data.slice(0, 3))).toMatchObject({
        action: 'catalog.version_published',
        actor: { type: 'api-key', id: writerKeyId },
        target: 'catalog:org/handbook',
        requestId: write.headers['x-request-id'],
      });
      const actions = new Set(data.map((event) => event.action));
      for (const action of [
        'api_key.created',
        'catalog.created',
        'catalog.updated',
        'catalog.version_published',
        'resource.created',
        'resource.version_published',
        'resource.archived',
        'catalog.archived',
      ]) {
        expect(actions, action).toContain(action);
      }
      expect(data[1]).toMatchObject({
        action: 'catalog.updated',
        summary: 'catalog org/handbook: description changed',
        requestId: write.headers['x-request-id'],
      });
      expect(data.filter((e) => e.action.startsWith('catalog.')).some((e) => e.actor.type === 'user')).toBe(
        true,
      );
      expect([...data].sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : 0)).map((e) => e.at)).toEqual(
        data.map((e) => e.at),
      );
      const forbidden = await app.inject({
        url: '/v3/identity/audit-events?accountId=globex',
        headers: token,
      });
      expect(forbidden.statusCode).toBe(403);
      expect(
        (await app.inject({ url: '/v3/identity/audit-events?accountId=acme', headers: writer })).statusCode,
      ).toBe(401);
    });
  });

  describe('a write that fails half-way', () => {
    it('leaves the database, the store and the reads as they were when the content store fails after some objects', async () => {
      let puts = 0;
      const failing: ContentStore = {
        backend: backend.objectStore.backend,
        put: async (hash, content) => {
          puts++;
          if (puts === 3) throw new Error('object store went away');
          return backend.objectStore.put(hash, content);
        },
        get: (hash) => backend.objectStore.get(hash),
        delete: (hash) => backend.objectStore.delete(hash),
        check: () => backend.objectStore.check(),
      };
      const fragile = await buildIdentityApp(backend, identity, undefined, { objectStore: failing });
      try {
        const before = await catalogData(backend);
        const listedBefore = (await read(`${CATALOG}/resources?pageSize=100`)).body;
        const body = catalogBody({
          version: '9',
          resources: ['p', 'q', 'r', 's'].map((c) => resource(`big-${c}`, { content: c.repeat(70_000) })),
        });
        const answer = await fragile.inject({ method: 'PUT', url: CATALOG, headers: writer, payload: body });
        expect(answer.statusCode).toBe(500);
        expect(puts).toBeGreaterThanOrEqual(3);
        expect(await catalogData(backend)).toEqual(before);
        expect((await read(`${CATALOG}/resources?pageSize=100`)).body).toBe(listedBefore);
      } finally {
        await fragile.close();
      }
    });
  });

  describe('limits', () => {
    it('refuses a body over PLAYBOOK_MAX_PUBLISH_BYTES with a problem document, writing nothing', async () => {
      const small = createTestIdentity(backend, { env: { PLAYBOOK_MAX_PUBLISH_BYTES: '4096' } });
      const limited = await buildIdentityApp(backend, small);
      try {
        const before = await catalogData(backend);
        const body = catalogBody({ resources: [resource('a', { content: 'x'.repeat(5000) })] });
        const answer = await limited.inject({
          method: 'PUT',
          url: '/v3/playbook/catalogs/org/too-big',
          headers: writer,
          payload: body,
        });
        // D29: HTTP's own status for a body over the limit, decided from Content-Length.
        expect(answer.statusCode).toBe(413);
        expect(problemOf(answer)).toMatchObject({ status: 413, code: 'content_too_large' });
        expect(answer.headers.connection).toBe('close');
        expect(await catalogData(backend)).toEqual(before);
        const fits = await limited.inject({
          method: 'PUT',
          url: '/v3/playbook/catalogs/org/fits',
          headers: writer,
          payload: catalogBody({ resources: [resource('a', { content: 'x'.repeat(1000) })] }),
        });
        expect(fits.statusCode).toBe(201);
      } finally {
        await limited.close();
        await small.close();
      }
    });
  });

  describe('two writers at once', () => {
    it('never interleave: each PUT is one transaction, and with one If-Match only one of them lands', async () => {
      const url = '/v3/playbook/catalogs/org/contended';
      const base = await put(url, catalogBody({ name: 'Start', version: 'v0' }));
      expect(base.statusCode).toBe(201);
      const bodies = [1, 2].map((n) =>
        catalogBody({
          name: `Writer ${n}`,
          version: `v${n}`,
          resources: [resource('intro'), resource(`only-${n}`)],
        }),
      );
      const both = await Promise.all(bodies.map((body) => put(url, body)));
      expect(both.map((answer) => answer.statusCode)).toEqual([200, 200]);
      // Whichever committed second saw the first's result: it archived the other's Resource.
      const archivedBySecond = both.map((answer) => answer.json().changes.archived);
      expect(archivedBySecond.sort()).toEqual([1, 2]);
      const stored = (await read(`${url}/resources?pageSize=100`)).json().data as {
        slug: string;
        status: string;
      }[];
      const active = stored.filter((r) => r.status === 'active').map((r) => r.slug);
      const winner = both.find((answer) => answer.json().changes.archived === 1)!.json().catalog.name;
      expect(active).toEqual(['intro', winner === 'Writer 1' ? 'only-1' : 'only-2']);

      const reset = await put(
        url,
        catalogBody({ name: 'Reset', version: 'v-reset', resources: [resource('intro')] }),
      );
      expect(reset.statusCode, reset.body).toBe(200);
      const etag = String(reset.headers.etag);
      const guarded = await Promise.all(
        [3, 4].map((n) =>
          put(url, catalogBody({ name: `Guarded ${n}`, version: `v${n}` }), { ...writer, 'if-match': etag }),
        ),
      );
      expect(guarded.map((answer) => answer.statusCode).sort()).toEqual([200, 412]);
    });
  });

  describe('two instances', () => {
    it('a PUT through one is read through the other within a second', async () => {
      const other = await buildIdentityApp(backend, identity);
      try {
        const url = '/v3/playbook/catalogs/org/handbook/resources?pageSize=100';
        const seen = (await other.inject({ url, headers: reader })).json().data.length;
        const written = await put(
          CATALOG,
          catalogBody({ version: '10', resources: [...catalogBody().resources, resource('late-arrival')] }),
        );
        expect(written.statusCode, written.body).toBe(200);
        const started = Date.now();
        let now = seen;
        while (now === seen && Date.now() - started < 3000) {
          await sleep(50);
          now = (await other.inject({ url, headers: reader })).json().data.length;
        }
        expect(now).toBe(seen + 1);
        expect(Date.now() - started).toBeLessThan(1000);
      } finally {
        await other.close();
      }
    });
  });
});
