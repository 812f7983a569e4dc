import { createHash } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Updateable } from 'kysely';
import { v7 as uuidv7 } from 'uuid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AnswerCache } from '../../src/answers/answer-cache.js';
import { answerKey } from '../../src/answers/answer-keys.js';
import type { Authenticator } from '../../src/auth/authenticator.js';
import type { Principal } from '../../src/auth/principal.js';
import { buildApp } from '../../src/composition/app.js';
import type { CatalogTable, Db, ResourceTable } from '../../src/db/tables.js';
import { Answer } from '../../src/http/answer.js';
import { Page, Problem } from '../../src/schemas/common.js';
import { Catalog, playbookSchemas, ResourceDetail, ResourceListItem } from '../../src/schemas/playbook.js';
import { unlimited } from '../helpers/app.js';
import { createTestBackend, loggedDb, type TestBackend } from '../helpers/backend.js';
import { checkCatalog, checkPage, checkResourceDetail, checkResourceListItem } from '../helpers/contract.js';
import {
  type GivenResource,
  givenAccount,
  givenCatalog,
  givenCatalogVersion,
  givenResource,
  tick,
} from '../helpers/fixtures.js';
import { dataChanged, type ReadSide, readSide } from '../helpers/read-side.js';
import { sleep } from '../helpers/wait.js';

/**
 * Answers from memory (answers/answer-cache.ts): what they answer is byte for byte what Fastify
 * serializes from the whole object with the route's schema; a hit reads no storage; every write,
 * once it moves the change log's head (every read side then starts afresh), shows in the next answer and its ETag;
 * no caller ever gets an answer its account or plan may not see (D5, D6); memory stays in its budget.
 */

/** Principals whose plan is read from the account's row on every request, so a plan change shows at once. */
class AccountAuthenticator implements Authenticator {
  constructor(private readonly db: Db) {}

  async authenticate(request: { headers: Record<string, unknown> }): Promise<Principal> {
    const accountId = String(request.headers['x-api-key']);
    const row = await this.db
      .selectFrom('accounts')
      .select('plan')
      .where('id', '=', accountId)
      .executeTakeFirst();
    return {
      accountId: accountId === 'nobody' ? null : accountId,
      plan: row?.plan ?? 'free',
      scopes: new Set(['playbook:read']),
      credential: { kind: 'api-key', keyId: accountId },
      restrictions: null,
    };
  }
}

/** A second connection to the backend's database that records the SQL of every statement. */
/** A key of the cache's own scheme, for tests of the cache alone. */
const key = (name: string) => answerKey('resource', null, name);

function recordingDb(backend: TestBackend, statements: string[]): Db {
  return loggedDb(
    backend,
    (event) => {
      if (event.level === 'query') statements.push(event.query.sql);
    },
    2,
  );
}

/**
 * How Fastify serializes an answer from its whole object with the routes' response schemas: the way
 * every answer was made before the caches, and the reference they are held to.
 */
async function referenceSerializer() {
  const app = Fastify();
  app.addSchema(Problem);
  for (const schema of playbookSchemas) app.addSchema(schema);
  let value: unknown;
  const schemas = {
    catalogs: Page(Type.Ref(Catalog)),
    resources: Page(Type.Ref(ResourceListItem)),
    resource: Type.Ref(ResourceDetail),
  };
  for (const [name, schema] of Object.entries(schemas)) {
    app.get(`/${name}`, { schema: { response: { 200: schema } } }, async () => value);
  }
  await app.ready();
  return {
    app,
    async serialize(kind: keyof typeof schemas, object: unknown): Promise<string> {
      value = object;
      return (await app.inject({ url: `/${kind}` })).body;
    },
  };
}

describe('read caches', () => {
  let backend: TestBackend;
  let db: Db;
  let app: FastifyInstance;
  let reads: ReadSide;
  let reference: Awaited<ReturnType<typeof referenceSerializer>>;
  const statements: string[] = [];
  /** The statements requests ran: the change log's poll may fall in any window, and is no request's cost. */
  const requestStatements = () => statements.filter((sql) => !sql.includes('"data_generation"'));
  let reader: Db;
  const acme = { 'x-api-key': 'acme' };
  const nobody = { 'x-api-key': 'nobody' };
  let handbook: { id: string; slug: string; accountId: string | null };
  let resources: GivenResource[];
  let gated: GivenResource;
  let runbooks: { id: string; slug: string; accountId: string | null };
  let runbook: GivenResource;

  async function appWith(answerCacheBytes?: number): Promise<{ app: FastifyInstance; reads: ReadSide }> {
    const reads = await readSide(
      reader,
      backend.content,
      answerCacheBytes === undefined ? {} : { answerCacheBytes },
    );
    const built = await buildApp({
      reads: reads.answers,
      authenticator: new AccountAuthenticator(backend.databases.primary),
      rateLimits: unlimited,
      readiness: [],
    });
    built.addHook('onClose', async () => reads.close());
    await built.ready();
    return { app: built, reads };
  }

  beforeAll(async () => {
    backend = await createTestBackend();
    db = backend.databases.primary;
    reader = recordingDb(backend, statements);
    ({ app, reads } = await appWith());
    reference = await referenceSerializer();
    await givenAccount(db, 'acme', 'free');
    await givenAccount(db, 'other', 'free');

    handbook = await givenCatalog(db, {
      slug: 'handbook',
      name: 'Handbook "quoted" \\ and\nnew line — ünïcødé 🚀',
      description: 'Escapes: \u2028 \u0007 </script>',
      facets: { capability: ['delivery'], technology: ['typescript'] },
    });
    resources = [];
    for (const [index, slug] of ['alpha', 'beta', 'gamma', 'delta', 'epsilon'].entries()) {
      resources.push(
        await givenResource(backend, handbook, {
          slug,
          kind: index % 2 === 0 ? 'document' : 'workflow',
          title: `Résumé ${slug} "${index}"`,
          description: index === 1 ? undefined : `About ${slug}\twith a tab`,
          facets: index === 2 ? undefined : { channel: ['web'] },
          manifest: { order: index, nested: { list: [1, 'two', null, true], empty: {} }, text: 'ü\n"' },
          versions: [
            { version: '1.0.0', content: `# ${slug} one\n` },
            {
              version: '2.0.0',
              content: `# ${slug} two — ✓\n`,
              storage: index === 3 ? 'object-storage' : 'database-text',
            },
          ],
        }),
      );
    }
    gated = await givenResource(backend, handbook, { slug: 'gated', facets: { planAccess: ['pro'] } });
    await givenResource(backend, handbook, { slug: 'no-current', withCurrent: false });
    await givenCatalogVersion(db, handbook, '1', [...resources, gated]);

    await givenCatalog(db, { slug: 'empty-archived', status: 'archived' });
    runbooks = await givenCatalog(db, { accountId: 'acme', slug: 'runbooks', status: 'draft' });
    runbook = await givenResource(backend, runbooks, { slug: 'incident', status: 'draft' });
    await givenCatalogVersion(db, runbooks, 'r1', [runbook]);
    await givenCatalog(db, { accountId: 'other', slug: 'runbooks' });
  });

  afterAll(async () => {
    await app?.close();
    await reference?.app.close();
    await reader?.destroy();
    await backend?.cleanup();
  });

  const get = (url: string, headers: Record<string, string> = acme) => app.inject({ url, headers });
  const CATALOGS = '/v3/playbook/catalogs';
  const HANDBOOK = '/v3/playbook/catalogs/svc/handbook/resources';
  const detailUrl = (resource: GivenResource) => `/v3/playbook/resources/${resource.id}`;

  /** The ETag and body of a 200, and proof that the old ETag no longer matches once they changed. */
  async function changed(url: string, before: { etag: string; body: string }) {
    const res = await app.inject({ url, headers: { ...acme, 'if-none-match': before.etag } });
    expect(res.statusCode, url).toBe(200);
    expect(res.headers.etag).not.toBe(before.etag);
    expect(res.body).not.toBe(before.body);
    return res;
  }

  async function snapshot(url: string) {
    const res = await get(url);
    expect(res.statusCode, url).toBe(200);
    return { etag: String(res.headers.etag), body: res.body };
  }

  describe('answers', () => {
    const cases: [string, () => string, Record<string, string>, 'catalogs' | 'resources' | 'resource'][] = [
      ['the Catalogs of an account', () => CATALOGS, acme, 'catalogs'],
      ['the Catalogs of no account', () => CATALOGS, nobody, 'catalogs'],
      ['one Catalog per page', () => `${CATALOGS}?pageSize=1&page=2`, acme, 'catalogs'],
      ['a page past the end', () => `${CATALOGS}?page=9`, acme, 'catalogs'],
      ['the Resources of a Catalog', () => HANDBOOK, acme, 'resources'],
      ['a kind filter', () => `${HANDBOOK}?kind=workflow&pageSize=1&page=2`, acme, 'resources'],
      ['an account Catalog', () => '/v3/playbook/catalogs/org/runbooks/resources', acme, 'resources'],
      ['a detail from the database', () => detailUrl(resources[0]!), acme, 'resource'],
      ['a detail from the object store', () => detailUrl(resources[3]!), acme, 'resource'],
    ];

    it.each(cases)(
      '%s is byte for byte what Fastify serializes from the whole object, cold and warm',
      async (_name, url, headers, kind) => {
        const cold = await get(url(), headers);
        const warm = await get(url(), headers);
        expect(cold.statusCode).toBe(200);
        expect(cold.headers['content-type']).toBe('application/json; charset=utf-8');
        expect(warm.body).toBe(cold.body);
        expect(warm.headers.etag).toBe(cold.headers.etag);
        expect(await reference.serialize(kind, cold.json())).toBe(cold.body);
        const check =
          kind === 'catalogs' ? checkCatalog : kind === 'resources' ? checkResourceListItem : undefined;
        expect(check ? checkPage(cold.json(), check) : checkResourceDetail(cold.json(), 'resource')).toEqual(
          [],
        );
      },
    );

    it("D29: the detail's ETag is its Resource's version tag, held with the answer", async () => {
      const url = detailUrl(resources[3]!);
      const first = await get(url);
      expect(first.headers.etag).toMatch(/^"r[A-Za-z0-9_-]{32}"$/);
      expect((await get(url)).headers.etag).toBe(first.headers.etag);
      // Another Resource, another tag.
      expect((await get(detailUrl(resources[2]!))).headers.etag).not.toBe(first.headers.etag);
    });

    it('HEAD answers the headers of GET without a body', async () => {
      const head = await app.inject({ method: 'HEAD', url: CATALOGS, headers: acme });
      const full = await get(CATALOGS);
      expect(head.statusCode).toBe(200);
      expect(head.body).toBe('');
      expect(head.headers.etag).toBe(full.headers.etag);
      expect(head.headers['content-length']).toBe(String(full.rawPayload.length));
    });

    it("one account's cached answers never reach another", async () => {
      const mine = (await get('/v3/playbook/catalogs?sourceScope=account', acme)).json();
      const theirs = (
        await get('/v3/playbook/catalogs?sourceScope=account', { 'x-api-key': 'other' })
      ).json();
      expect(mine.data.map((c: { id: string }) => c.id)).toEqual([runbooks.id]);
      expect(theirs.data).toHaveLength(1);
      expect(theirs.data[0].id).not.toBe(runbooks.id);
      expect(
        (await get('/v3/playbook/catalogs/org/runbooks/resources', { 'x-api-key': 'other' })).json().data,
      ).toEqual([]);
    });
  });

  /** A write made straight in storage, then the change log's head moved past it. */
  async function write(change: (db: Db) => Promise<unknown>) {
    await change(db);
    await dataChanged(db);
  }

  describe('from memory', () => {
    it('a repeated read is answered without a statement to storage, for every read operation', async () => {
      const resource = resources[0]!;
      const urls = [
        CATALOGS,
        HANDBOOK,
        detailUrl(resource),
        `${detailUrl(resource)}/versions`,
        `${detailUrl(resource)}/versions/${resource.currentVersionId}`,
      ];
      for (const url of urls) await get(url);
      statements.length = 0;
      const hits = reads.cache.stats.hits;
      for (const url of urls) {
        const res = await get(url);
        expect(res.statusCode, url).toBe(200);
      }
      expect(requestStatements()).toEqual([]);
      expect(reads.cache.stats.hits - hits).toBe(urls.length);
    });

    it('a write that has not moved the change log is not seen; once it has, it is', async () => {
      const before = await snapshot(CATALOGS);
      await db.updateTable('catalogs').set({ name: 'Not announced' }).where('id', '=', handbook.id).execute();
      expect((await get(CATALOGS)).body).toBe(before.body);
      await dataChanged(db);
      const res = await changed(CATALOGS, before);
      expect(res.json().data.find((c: { id: string }) => c.id === handbook.id).name).toBe('Not announced');
    });

    it('a Resource Version revalidated by ETag loads no content, even before its answer was ever sent', async () => {
      const resource = resources[1]!;
      const url = `${detailUrl(resource)}/versions/${resource.versionIds[0]}`;
      const etag = String((await get(url)).headers.etag);
      await write(async () => {}); // forget every answer
      statements.length = 0;
      const res = await app.inject({ url, headers: { ...acme, 'if-none-match': etag } });
      expect(res.statusCode).toBe(304);
      expect(statements.filter((sql) => sql.includes('content_blobs'))).toEqual([]);
      // The lazy answer is kept: the next revalidation reads nothing at all.
      statements.length = 0;
      expect((await app.inject({ url, headers: { ...acme, 'if-none-match': etag } })).statusCode).toBe(304);
      expect(requestStatements()).toEqual([]);
      // And the full answer carries the same validator.
      const full = await get(url);
      expect(full.statusCode).toBe(200);
      expect(full.headers.etag).toBe(etag);
    });
  });

  describe('Catalogs', () => {
    it('a Catalog changed in name, status or facets shows once the change log moves, though its updated_at did not', async () => {
      let before = await snapshot(CATALOGS);
      const changes: Updateable<CatalogTable>[] = [
        { name: 'Renamed handbook' },
        { status: 'archived' },
        { facets: JSON.stringify({ capability: ['search'] }) },
        { description: null },
      ];
      for (const change of changes) {
        await write((db) => db.updateTable('catalogs').set(change).where('id', '=', handbook.id).execute());
        const res = await changed(CATALOGS, before);
        const catalog = res.json().data.find((c: { id: string }) => c.id === handbook.id);
        if (change.name) expect(catalog.name).toBe(change.name);
        if (change.status) expect(catalog.status).toBe('archived');
        if (change.facets) expect(catalog.facets).toEqual({ capability: ['search'] });
        if ('description' in change) expect(catalog.description).toBeUndefined();
        before = { etag: String(res.headers.etag), body: res.body };
      }
    });

    it('a new catalog version shows with its pins', async () => {
      const before = await snapshot(CATALOGS);
      const versionId = await givenCatalogVersion(db, handbook, '2', resources.slice(0, 2));
      const res = await changed(CATALOGS, before);
      const current = res.json().data.find((c: { id: string }) => c.id === handbook.id).currentVersion;
      expect(current.id).toBe(versionId);
      expect(current.resourcePins.map((pin: { resourceId: string }) => pin.resourceId)).toEqual(
        resources.slice(0, 2).map((r) => r.id),
      );
      expect(current.resourceCount).toBe(2);
    });

    it('a Catalog no longer visible (a service-owned draft) leaves the list, and its Resources answer 404', async () => {
      const extra = await givenCatalog(db, { slug: 'soon-draft' });
      const resource = await givenResource(backend, extra, { slug: 'doc' });
      await givenCatalogVersion(db, extra, '1', [resource]);
      expect((await get(detailUrl(resource))).statusCode).toBe(200);
      expect((await get('/v3/playbook/catalogs/svc/soon-draft/resources')).statusCode).toBe(200);
      const before = await snapshot(CATALOGS);
      await write((db) =>
        db.updateTable('catalogs').set({ status: 'draft' }).where('id', '=', extra.id).execute(),
      );
      const res = await changed(CATALOGS, before);
      expect(res.json().data.map((c: { id: string }) => c.id)).not.toContain(extra.id);
      expect((await get(detailUrl(resource))).statusCode).toBe(404);
      expect((await get('/v3/playbook/catalogs/svc/soon-draft/resources')).statusCode).toBe(404);
    });
  });

  describe('Resources', () => {
    it('a Resource changed in any column shows in the list and the detail, though updated_at did not move', async () => {
      const resource = resources[1]!;
      let list = await snapshot(HANDBOOK);
      let detail = await snapshot(detailUrl(resource));
      const changes: Updateable<ResourceTable>[] = [
        { title: 'A new title' },
        { manifest: JSON.stringify({ changed: true }) },
        { description: 'Now described' },
        { facets: null },
        { kind: 'policy' },
      ];
      for (const change of changes) {
        await write((db) => db.updateTable('resources').set(change).where('id', '=', resource.id).execute());
        const listed = await changed(HANDBOOK, list);
        const shown = await changed(detailUrl(resource), detail);
        const item = listed.json().data.find((r: { id: string }) => r.id === resource.id);
        for (const value of [item, shown.json()]) {
          if (change.title) expect(value.title).toBe(change.title);
          if (change.manifest) expect(value.manifest).toEqual({ changed: true });
          if (change.description) expect(value.description).toBe(change.description);
          if ('facets' in change) expect(value.facets).toBeUndefined();
          if (change.kind) expect(value.kind).toBe('policy');
        }
        list = { etag: String(listed.headers.etag), body: listed.body };
        detail = { etag: String(shown.headers.etag), body: shown.body };
      }
      const filtered = (await get(`${HANDBOOK}?kind=policy`)).json();
      expect(filtered.data.map((r: { id: string }) => r.id)).toEqual([resource.id]);
    });

    it('a changed version row, or a Catalog renamed under its Resources, shows in every answer', async () => {
      const resource = resources[0]!;
      const list = await snapshot(HANDBOOK);
      await write((db) =>
        db
          .updateTable('resource_versions')
          .set({ media_type: 'text/plain' })
          .where('id', '=', resource.currentVersionId)
          .execute(),
      );
      const listed = await changed(HANDBOOK, list);
      const item = listed.json().data.find((r: { id: string }) => r.id === resource.id);
      expect(item.currentVersion.mediaType).toBe('text/plain');
      expect((await get(detailUrl(resource))).json().currentVersion.mediaType).toBe('text/plain');

      const other = await givenCatalog(db, { slug: 'renamed-later' });
      const inside = await givenResource(backend, other, { slug: 'inside' });
      expect((await get(detailUrl(inside))).json().catalogHumanRef).toBe('svc/renamed-later');
      await write((db) =>
        db.updateTable('catalogs').set({ slug: 'renamed-now' }).where('id', '=', other.id).execute(),
      );
      const moved = (await get('/v3/playbook/catalogs/svc/renamed-now/resources')).json();
      expect(moved.data[0].humanRef).toBe('svc/renamed-now/inside');
      expect((await get(detailUrl(inside))).json().humanRef).toBe('svc/renamed-now/inside');
      expect((await get('/v3/playbook/catalogs/svc/renamed-later/resources')).statusCode).toBe(404);
    });

    it('a superseded version shows: a new current version in the list and the detail, the old one superseded', async () => {
      const resource = resources[2]!;
      const list = await snapshot(HANDBOOK);
      const detail = await snapshot(detailUrl(resource));
      const oldVersionUrl = `${detailUrl(resource)}/versions/${resource.currentVersionId}`;
      const oldVersion = await snapshot(oldVersionUrl);

      const content = '# gamma three\n';
      const hash = createHash('sha256').update(content).digest('hex');
      const versionId = uuidv7();
      const at = tick();
      await write(async (db) => {
        await db.insertInto('content_blobs').values({ content_hash: hash, body: content }).execute();
        await db
          .insertInto('resource_versions')
          .values({
            id: versionId,
            resource_id: resource.id,
            version: '3.0.0',
            content_hash: hash,
            content_size_bytes: Buffer.byteLength(content),
            media_type: 'text/markdown',
            storage_backend: 'database-text',
            status: 'published',
            manifest: '{}',
            published_at: at,
            superseded_at: null,
            archived_at: null,
            created_at: at,
          })
          .execute();
        await db
          .updateTable('resource_versions')
          .set({ status: 'superseded', superseded_at: at })
          .where('id', '=', resource.currentVersionId)
          .execute();
        await db
          .updateTable('resources')
          .set({ current_version_id: versionId })
          .where('id', '=', resource.id)
          .execute();
      });

      const item = (await changed(HANDBOOK, list))
        .json()
        .data.find((r: { id: string }) => r.id === resource.id);
      expect(item.currentVersion).toMatchObject({ id: versionId, version: '3.0.0', status: 'published' });
      expect((await changed(detailUrl(resource), detail)).json().currentVersion).toMatchObject({
        id: versionId,
        content,
      });
      // D11 (revised): a version's answer moves with its status, so its validator does too.
      const superseded = (await changed(oldVersionUrl, oldVersion)).json();
      expect(superseded).toMatchObject({ status: 'superseded', supersededAt: at });
    });

    it('a service-owned Resource or version turned draft is hidden, cached or not', async () => {
      const resource = resources[4]!;
      expect((await get(detailUrl(resource))).statusCode).toBe(200);
      const list = await snapshot(HANDBOOK);
      await write((db) =>
        db
          .updateTable('resource_versions')
          .set({ status: 'draft' })
          .where('id', '=', resource.currentVersionId)
          .execute(),
      );
      const item = (await changed(HANDBOOK, list))
        .json()
        .data.find((r: { id: string }) => r.id === resource.id);
      expect(item.currentVersion).toBeUndefined();
      expect((await get(detailUrl(resource))).statusCode).toBe(404);

      await write((db) =>
        db.updateTable('resources').set({ status: 'draft' }).where('id', '=', resource.id).execute(),
      );
      const listed = (await get(HANDBOOK)).json();
      expect(listed.data.map((r: { id: string }) => r.id)).not.toContain(resource.id);
    });
  });

  describe('isolation', () => {
    it('D6: a plan change shows at once, without a data change, on the detail, the version and a revalidation', async () => {
      const versionUrl = `${detailUrl(gated)}/versions/${gated.currentVersionId}`;
      expect((await get(detailUrl(gated))).statusCode).toBe(403);
      await db.updateTable('accounts').set({ plan: 'pro' }).where('id', '=', 'acme').execute();
      const detail = await get(detailUrl(gated));
      expect(detail.statusCode).toBe(200);
      const version = await get(versionUrl);
      expect(version.statusCode).toBe(200);

      // Both are now held for the pro plan; a free caller of another account still gets 403.
      expect((await get(detailUrl(gated), { 'x-api-key': 'other' })).statusCode).toBe(403);
      await db.updateTable('accounts').set({ plan: 'free' }).where('id', '=', 'acme').execute();
      expect((await get(detailUrl(gated))).statusCode).toBe(403);
      for (const [url, etag] of [
        [detailUrl(gated), detail.headers.etag],
        [versionUrl, version.headers.etag],
      ] as const) {
        const res = await app.inject({ url, headers: { ...acme, 'if-none-match': String(etag) } });
        expect(res.statusCode, url).toBe(403);
      }
      // The list shows a gated Resource whatever the plan (D6).
      expect((await get(HANDBOOK)).json().data.map((r: { id: string }) => r.id)).toContain(gated.id);
    });

    it("D5: one account's answers never reach another, nor a caller of no account, by any operation", async () => {
      const runbookVersion = `${detailUrl(runbook)}/versions/${runbook.currentVersionId}`;
      const urls = [
        '/v3/playbook/catalogs/org/runbooks/resources',
        detailUrl(runbook),
        `${detailUrl(runbook)}/versions`,
        runbookVersion,
      ];
      // Held for acme first, then asked for by others.
      for (const url of urls) expect((await get(url)).statusCode, url).toBe(200);
      for (const url of urls.slice(1)) {
        expect((await get(url, { 'x-api-key': 'other' })).statusCode, url).toBe(404);
        expect((await get(url, nobody)).statusCode, url).toBe(404);
      }
      const theirs = (await get(urls[0]!, { 'x-api-key': 'other' })).json();
      expect(theirs.data).toEqual([]);
      expect((await get(urls[0]!, nobody)).statusCode).toBe(404);
      const mine = (await get(`${CATALOGS}?sourceScope=account`)).json();
      expect(mine.data.map((c: { id: string }) => c.id)).toEqual([runbooks.id]);
      const others = (await get(`${CATALOGS}?sourceScope=account`, { 'x-api-key': 'other' })).json();
      expect(others.data.map((c: { id: string }) => c.id)).not.toContain(runbooks.id);
      expect((await get(`${CATALOGS}?sourceScope=account`, nobody)).json().data).toEqual([]);
    });

    it('a Resource Version answer still reads visibility and the plan gate in the order of the rules', async () => {
      const missing = '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
      expect((await get(`${detailUrl(gated)}/versions/${missing}`)).statusCode).toBe(403);
      expect((await get(`${detailUrl(resources[0]!)}/versions/${missing}`)).statusCode).toBe(404);
      expect((await get(`/v3/playbook/resources/${missing}/versions/${missing}`)).statusCode).toBe(404);
    });
  });

  describe('bounds', () => {
    it('the cache stays within its budget and answers exactly what a service without one does', async () => {
      const budget = 16 * 1024;
      const bounded = await appWith(budget);
      const uncached = await appWith(0);
      try {
        const many = await givenCatalog(db, { slug: 'many' });
        const members: GivenResource[] = [];
        for (let i = 0; i < 30; i++) {
          members.push(
            await givenResource(backend, many, {
              slug: `member-${String(i).padStart(2, '0')}`,
              manifest: { i, text: 'x'.repeat(400) },
            }),
          );
        }
        await givenCatalogVersion(db, many, '1', members);
        const urls = [
          CATALOGS,
          `${CATALOGS}?pageSize=1`,
          '/v3/playbook/catalogs/svc/many/resources?pageSize=100',
          '/v3/playbook/catalogs/svc/many/resources?pageSize=7&page=2',
          ...members.map(detailUrl),
        ];
        for (let round = 0; round < 2; round++) {
          for (const url of urls) {
            for (const encoding of [undefined, 'br', 'gzip']) {
              const headers = encoding ? { ...acme, 'accept-encoding': encoding } : acme;
              const expected = await uncached.app.inject({ url, headers });
              const actual = await bounded.app.inject({ url, headers });
              expect(actual.statusCode, url).toBe(expected.statusCode);
              expect(actual.body, url).toBe(expected.body);
              expect(actual.headers.etag, url).toBe(expected.headers.etag);
              expect(bounded.reads.cache.stats.bytes).toBeLessThanOrEqual(budget);
            }
          }
        }
        const stats = bounded.reads.cache.stats;
        expect(stats.entries).toBeGreaterThan(0);
        expect(stats.hits).toBeGreaterThan(0);
        expect(uncached.reads.cache.stats.entries).toBe(0);
      } finally {
        await bounded.app.close();
        await uncached.app.close();
      }
    });

    it('counts compressed forms as they are made, and forgets the answer that no longer fits', async () => {
      const cache = new AnswerCache(2 * 1024 * 1024);
      const answer = Answer.json(JSON.stringify({ text: 'y'.repeat(512 * 1024) }));
      cache.set(key('a'), answer, cache.ticket(), ['svc']);
      const before = cache.stats.bytes;
      await answer.encoded('gzip');
      expect(cache.stats.bytes).toBeGreaterThan(before);
      expect(cache.stats.bytes - before).toBe(answer.bytes - answer.body.length);
      // Asked for twice: a full budget keeps an answer whose key it has seen before (the admission).
      for (let i = 0; i < 2; i++) {
        cache.set(key('b'), Answer.json(JSON.stringify({ text: 'z'.repeat(1800 * 1024) })), cache.ticket(), [
          'svc',
        ]);
      }
      expect(cache.get(key('a'))).toBeUndefined();
      expect(cache.get(key('b'))).toBeDefined();
      expect(cache.stats.bytes).toBeLessThanOrEqual(2 * 1024 * 1024);
    });

    it('once full, keeps a new answer only the second time its key is asked for (D30)', () => {
      const cache = new AnswerCache(64 * 1024);
      const answerOf = (i: number) => Answer.json(JSON.stringify({ i, text: 'x'.repeat(1000) }));
      // While there is room, every answer is kept at once.
      for (let i = 0; i < 10; i++) cache.set(key(`hot-${i}`), answerOf(i), cache.ticket(), ['svc']);
      expect(cache.stats.entries).toBe(10);
      expect(cache.stats.refused).toBe(0);
      // Fill the budget with answers read once each.
      for (let i = 0; cache.stats.refused === 0 && i < 1000; i++) {
        cache.get(key(`hot-${i % 10}`));
        cache.set(key(`once-${i}`), answerOf(i), cache.ticket(), ['svc']);
      }
      expect(cache.stats.refused).toBe(1);
      // A stream of reads that never come again is refused, and evicts none of those read again.
      const refusedBefore = cache.stats.refused;
      for (let n = 0; n < 500; n++) {
        for (let h = 0; h < 10; h++) expect(cache.get(key(`hot-${h}`)), `hot-${h}`).toBeDefined();
        cache.set(key(`stream-${n}`), answerOf(n), cache.ticket(), ['svc']);
        expect(cache.get(key(`stream-${n}`))).toBeUndefined();
      }
      expect(cache.stats.refused).toBe(refusedBefore + 500);
      // Asked for again, an answer is kept, and the least recently used goes.
      cache.set(key('stream-7'), answerOf(7), cache.ticket(), ['svc']);
      expect(cache.get(key('stream-7'))).toBeDefined();
      for (let h = 0; h < 10; h++) expect(cache.get(key(`hot-${h}`)), `hot-${h}`).toBeDefined();
      // An answer it holds is replaced at once, never refused.
      cache.set(key('hot-3'), answerOf(33), cache.ticket(), ['svc']);
      expect(cache.get(key('hot-3'))).toBeDefined();
      expect(cache.stats.refused).toBe(refusedBefore + 500);
    });

    it('never keeps an answer made from reads begun before the data changed', async () => {
      const cache = new AnswerCache(1024 * 1024);
      const ticket = cache.ticket();
      cache.clear();
      cache.set(key('stale'), Answer.json('{}'), ticket, ['svc']);
      expect(cache.get(key('stale'))).toBeUndefined();
      cache.set(key('fresh'), Answer.json('{}'), cache.ticket(), ['svc']);
      expect(cache.get(key('fresh'))).toBeDefined();
    });

    it('D26: a drop of one namespace forgets its answers, keeps the others, and refuses answers begun before it', async () => {
      const cache = new AnswerCache(1024 * 1024);
      const before = cache.ticket();
      cache.set(key('acme'), Answer.json('{}'), before, ['acme']);
      cache.set(key('globex'), Answer.json('{}'), before, ['globex']);
      cache.set(key('acme+svc'), Answer.json('{}'), before, ['svc', 'acme']);
      cache.set(key('svc'), Answer.json('{}'), before, ['svc']);
      cache.drop(['acme']);
      expect(cache.get(key('acme'))).toBeUndefined();
      expect(cache.get(key('acme+svc'))).toBeUndefined();
      expect(cache.get(key('globex'))).toBeDefined();
      expect(cache.get(key('svc'))).toBeDefined();
      // Begun before the drop: refused for acme, kept for another namespace.
      cache.set(key('late acme'), Answer.json('{}'), before, ['acme']);
      cache.set(key('late globex'), Answer.json('{}'), before, ['globex']);
      expect(cache.get(key('late acme'))).toBeUndefined();
      expect(cache.get(key('late globex'))).toBeDefined();
      cache.set(key('new acme'), Answer.json('{}'), cache.ticket(), ['acme']);
      expect(cache.get(key('new acme'))).toBeDefined();
      // A service change drops what every caller sees, and nothing held for one account alone.
      cache.drop(['svc']);
      expect(cache.get(key('svc'))).toBeUndefined();
      expect(cache.get(key('globex'))).toBeDefined();
      expect(cache.get(key('new acme'))).toBeDefined();
    });

    it('one load for concurrent requests of the same answer, and none shared across a clear', async () => {
      const cache = new AnswerCache(1024 * 1024);
      let loads = 0;
      const load = async () => {
        loads++;
        await sleep(10);
        return Answer.json(`{"load":${loads}}`);
      };
      const [a, b] = await Promise.all([cache.once(key('k'), load), cache.once(key('k'), load)]);
      expect(loads).toBe(1);
      expect(a).toBe(b);
      const first = cache.once(key('k'), load);
      cache.clear();
      const second = cache.once(key('k'), load);
      expect(await first).not.toBe(await second);
      expect(loads).toBe(3);
    });
  });
});
