import http from 'node:http';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ReadAnswers } from '../../src/answers/read-answers.js';
import {
  compileDetailSerializer,
  MAX_STORED_CHARS,
  type OwnerDetail,
  STORED_DETAIL_FORM,
  StoredDetailsBuilder,
} from '../../src/catalog/stored-details.js';
import { appendChanges } from '../../src/changes/change-log.js';
import { MemoryReads } from '../../src/routes/memory-reads.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { runCli } from '../helpers/cli.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource, tamperDatabaseText } from '../helpers/fixtures.js';
import { publishedResource as resource } from '../helpers/publish-bodies.js';
import { followNow, type ReadSide, readSide } from '../helpers/read-side.js';
import { waitFor } from '../helpers/wait.js';

/**
 * D30: the read model of Resources' details. Each visible Resource's detail is stored whole, its text
 * the bytes a read from the rows sends; a read not answered from memory sends it after one search.
 * Every write deletes the rows of what it changes in its own transaction (D26), and the service writes
 * them again as it follows the change log, never from rows older than a change. On both stacks.
 */

const CATALOG = '/v3/playbook/catalogs/org/handbook';
const detailUrl = (id: string) => `/v3/playbook/resources/${id}`;

/** A problem document names its request's id, which differs between two sendings. */
const withoutRequestId = (body: string) => body.replace(/"requestId":"[^"]*"/, '"requestId":""');

/** A GET sent as given, with no header of a client library's own: status, body and ETag. */
function overSocket(url: string, headers: Record<string, string>) {
  return new Promise<{ status: number; body: string; etag: string | undefined }>((resolve, reject) => {
    http
      .get(url, { headers }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({
            status: response.statusCode ?? 0,
            body: Buffer.concat(chunks).toString(),
            etag: response.headers.etag,
          }),
        );
        response.on('error', reject);
      })
      .on('error', reject);
  });
}

describe('stored details (D30)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  /** An app whose reads never use the read model: what every stored answer must equal. */
  let plain: FastifyInstance;
  let plainSide: ReadSide;
  let writer: Record<string, string>;
  let stranger: Record<string, string>;
  let free: Record<string, string>;
  let pro: Record<string, string>;
  let noAccount: Record<string, string>;
  const ids: Record<string, string> = {};
  const ours: { app: FastifyInstance; side: ReadSide; builder: StoredDetailsBuilder; asked: string[] }[] = [];

  /**
   * An app reading through the read model, with its builder (not started: a test writes rows with
   * `buildAll` or starts it). `read` stands in for the builder's read of a Resource.
   */
  async function withReadModel(
    read?: (resourceId: string, side: ReadSide) => Promise<OwnerDetail | undefined>,
  ) {
    const side = await readSide(backend.databases.reader, backend.content, {
      metrics: identity.metrics,
      ...(backend.databases.readNow ? { readNow: backend.databases.readNow } : {}),
    });
    const asked: string[] = [];
    const builder = new StoredDetailsBuilder(
      backend.databases.reader,
      identity.writes,
      (id) => (read ? read(id, side) : side.playbook.ownerDetail(id)),
      compileDetailSerializer(),
      { round: 2 },
    );
    const answers = new ReadAnswers(side.playbook, side.cache, (id) => {
      asked.push(id);
      builder.request(id);
    });
    const app = await buildIdentityApp(backend, identity, undefined, { reads: { ...side, answers } });
    const made = { app, side, builder, asked };
    ours.push(made);
    return made;
  }

  const storedRow = (resourceId: string) =>
    backend.databases.primary
      .selectFrom('stored_details')
      .selectAll()
      .where('resource_id', '=', resourceId)
      .executeTakeFirst();

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    plainSide = await readSide(backend.databases.reader, backend.content, {
      metrics: identity.metrics,
      ...(backend.databases.readNow ? { readNow: backend.databases.readNow } : {}),
    });
    plain = await buildIdentityApp(backend, identity, undefined, { reads: plainSide });
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    writer = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    stranger = (await identity.mintKey({ accountId: 'globex', scopes: ['playbook:read'] })).headers;
    free = (await identity.mintKey({ accountId: 'initech', scopes: ['playbook:read'], plan: 'free' }))
      .headers;
    pro = (await identity.mintKey({ accountId: 'umbrella', scopes: ['playbook:read'], plan: 'pro' })).headers;
    noAccount = await identity.tokenHeaders({ accounts: [] });

    const svc = await givenCatalog(backend.databases.primary, { slug: 'guides' });
    const old = await givenCatalog(backend.databases.primary, { slug: 'old-guides', status: 'archived' });
    const hidden = await givenCatalog(backend.databases.primary, { slug: 'coming', status: 'draft' });
    ids.svc = (await givenResource(backend, svc, { slug: 'intro', manifest: { steps: 3, ratio: 1.5 } })).id;
    ids.gated = (await givenResource(backend, svc, { slug: 'gated', facets: { planAccess: ['pro'] } })).id;
    ids.draft = (await givenResource(backend, svc, { slug: 'wip', status: 'draft' })).id;
    ids.object = (
      await givenResource(backend, svc, {
        slug: 'stored-apart',
        versions: [{ version: '2.0.0', content: '# Apart\n', storage: 'object-storage' }],
      })
    ).id;
    ids.archivedCatalog = (await givenResource(backend, old, { slug: 'legacy' })).id;
    ids.hiddenCatalog = (await givenResource(backend, hidden, { slug: 'soon' })).id;
    const published = await plain.inject({
      method: 'PUT',
      url: CATALOG,
      headers: writer,
      payload: {
        name: 'Handbook',
        version: '1',
        resources: [
          resource('welcome', { description: 'Ünïcode “quotes” and \u2028 line separators' }),
          resource('big', { content: 'b'.repeat(70_000) }),
        ],
      },
    });
    expect(published.statusCode).toBe(201);
    const listed = await plain.inject({ url: `${CATALOG}/resources`, headers: writer });
    for (const { slug, id } of listed.json().data as { slug: string; id: string }[]) ids[slug] = id;
    expect(Object.keys(ids)).toHaveLength(8);
  });

  afterAll(async () => {
    for (const { app, side, builder } of ours) {
      builder.stop();
      await builder.settled();
      await app.close();
      side.close();
    }
    await plain.close();
    plainSide.close();
    await identity.close();
    await backend.cleanup();
  });

  /** A new version of the account's Resource `slug`, published through `app` by the writer. */
  const putResource = (app: FastifyInstance, slug: string, version: string, content: string) =>
    app.inject({
      method: 'PUT',
      url: `${CATALOG}/resources/${slug}`,
      headers: writer,
      payload: { ...resource(slug, { version, content }), slug: undefined },
    });

  /** What a read from the rows answers `headers` for `id`: status, body and ETag. */
  async function fromRows(id: string, headers: Record<string, string>) {
    // Whatever was written, the read from the rows has followed it.
    await followNow();
    const answer = await plain.inject({ url: detailUrl(id), headers });
    return { status: answer.statusCode, body: answer.body, etag: answer.headers.etag };
  }

  it('stores each Resource its owner sees, as the bytes and tag a read from the rows sends', async () => {
    const { app, builder } = await withReadModel();
    await builder.buildAll();
    const visible = ['svc', 'gated', 'object', 'archivedCatalog', 'welcome', 'big'];
    for (const name of visible) {
      const row = await storedRow(ids[name]!);
      expect(row, name).toMatchObject({ form: STORED_DETAIL_FORM });
    }
    // A service draft, and a Resource of a service Catalog in draft, are seen by nobody: no row.
    expect(await storedRow(ids.draft!)).toBeUndefined();
    expect(await storedRow(ids.hiddenCatalog!)).toBeUndefined();
    for (const name of visible) {
      const headers = name === 'welcome' || name === 'big' ? writer : pro;
      const stored = await app.inject({ url: detailUrl(ids[name]!), headers });
      const rows = await fromRows(ids[name]!, headers);
      expect(rows.status, name).toBe(200);
      expect({ status: stored.statusCode, body: stored.body, etag: stored.headers.etag }, name).toEqual(rows);
      expect(stored.body, name).toBe((await storedRow(ids[name]!))?.body);
      // Compressed alike: the same ETag a read from the rows gives for gzip.
      const gzip = { ...headers, 'accept-encoding': 'gzip' };
      const [storedGzip, rowsGzip] = await Promise.all([
        app.inject({ url: detailUrl(ids[name]!), headers: gzip }),
        plain.inject({ url: detailUrl(ids[name]!), headers: gzip }),
      ]);
      expect(storedGzip.headers.etag, name).toBe(rowsGzip.headers.etag);
      expect(storedGzip.rawPayload.equals(rowsGzip.rawPayload), name).toBe(true);
    }
  });

  it('a read memory does not hold is answered over a socket from the stored row at once, as the rows would (SQLite)', async () => {
    const { app, side, builder } = await withReadModel();
    await builder.buildAll();
    const base = await listenLocally(app);
    const taken = vi.spyOn(MemoryReads.prototype, 'handle');
    try {
      const credentials = { writer, stranger, free, pro, noAccount };
      // Each credential verified once, as a caller's first request does: the fast path knows it then.
      for (const headers of Object.values(credentials))
        await overSocket(`${base}${detailUrl(ids.svc!)}`, headers);
      for (const name of ['svc', 'gated', 'object', 'archivedCatalog', 'welcome', 'big', 'draft']) {
        for (const [who, headers] of Object.entries(credentials)) {
          side.cache.clear();
          const missesBefore = side.cache.stats.misses;
          const socket = await overSocket(`${base}${detailUrl(ids[name]!)}`, headers);
          const fast = taken.mock.results.at(-1)?.value === true;
          const rows = await fromRows(ids[name]!, headers);
          expect({ ...socket, body: withoutRequestId(socket.body) }, `${name} ${who}`).toEqual({
            ...rows,
            body: withoutRequestId(rows.body),
          });
          // Answered at once where the database can search without a promise, and counted as a miss.
          // (An access token is verified by the hooks: the fast path takes API keys alone.)
          if (rows.status === 200 && who !== 'noAccount' && backend.databases.readNow) {
            expect(fast, `${name} ${who}`).toBe(true);
            expect(side.cache.stats.misses, `${name} ${who}`).toBe(missesBefore + 1);
          }
        }
      }
    } finally {
      taken.mockRestore();
    }
  });

  it('answers a read from the stored row, not the rows', async () => {
    const { builder } = await withReadModel();
    await builder.buildAll();
    // Changed behind the service's back (no write does this): the next read from memory's miss shows it.
    const row = await storedRow(ids.svc!);
    const marked = row!.body.replace('"title":"Resource intro"', '"title":"From the read model"');
    expect(marked).not.toBe(row!.body);
    await backend.databases.primary
      .updateTable('stored_details')
      .set({ body: marked })
      .where('resource_id', '=', ids.svc!)
      .execute();
    const { app } = await withReadModel();
    const answer = await app.inject({ url: detailUrl(ids.svc!), headers: noAccount });
    expect(answer.statusCode).toBe(200);
    expect(answer.json().title).toBe('From the read model');
    await backend.databases.primary
      .updateTable('stored_details')
      .set({ body: row!.body })
      .where('resource_id', '=', ids.svc!)
      .execute();
  });

  it('keeps the rules of a read from the rows: 404 for another account, 403 for a plan, 404 unseen', async () => {
    const { app, builder } = await withReadModel();
    await builder.buildAll();
    expect(await storedRow(ids.welcome!)).toBeDefined();
    for (const [name, headers] of [
      ['welcome', stranger],
      ['welcome', noAccount],
      ['big', free],
      ['gated', free],
      ['gated', noAccount],
      ['gated', pro],
      ['svc', stranger],
      ['draft', pro],
      ['hiddenCatalog', writer],
    ] as const) {
      const stored = await app.inject({ url: detailUrl(ids[name]!), headers });
      const rows = await fromRows(ids[name]!, headers);
      const seen = (status: number, body: string) =>
        // A problem document names its request: its status and code are what must agree.
        status === 200 ? { status, body } : { status, code: (JSON.parse(body) as { code: string }).code };
      expect(seen(stored.statusCode, stored.body), name).toEqual(seen(rows.status, rows.body));
    }
    expect((await app.inject({ url: detailUrl(ids.welcome!), headers: stranger })).statusCode).toBe(404);
    const gated = await app.inject({ url: detailUrl(ids.gated!), headers: free });
    expect(gated.statusCode).toBe(403);
    expect(gated.json().code).toBe('plan_required');
  });

  it('deletes the rows of what a write changes, in its transaction, and writes them again', async () => {
    const { app, builder } = await withReadModel();
    await builder.buildAll();
    const before = await storedRow(ids.welcome!);
    const neighbour = await storedRow(ids.big!);
    expect(neighbour).toBeDefined();
    const written = await putResource(app, 'welcome', '1.1.0', '# Welcome back\n');
    expect(written.statusCode).toBe(200);
    // Gone with the commit, before any follower has read the log; the Catalog's other Resource stays.
    expect(await storedRow(ids.welcome!)).toBeUndefined();
    expect(await storedRow(ids.big!)).toEqual(neighbour);
    await followNow();
    const read = await app.inject({ url: detailUrl(ids.welcome!), headers: writer });
    expect(read.json().currentVersion.content).toBe('# Welcome back\n');
    await builder.buildAll();
    const after = await storedRow(ids.welcome!);
    expect(after?.tag).not.toBe(before?.tag);
    expect(after?.body).toBe((await fromRows(ids.welcome!, writer)).body);
  });

  it('deletes the rows of every Resource of a Catalog whose change they show, and writes them again', async () => {
    const { app, side, builder } = await withReadModel();
    const put = await app.inject({
      method: 'PUT',
      url: '/v3/playbook/catalogs/org/attic',
      headers: writer,
      payload: { name: 'Attic', version: '1', resources: [resource('box'), resource('lamp')] },
    });
    expect(put.statusCode).toBe(201);
    const listed = await plain.inject({ url: '/v3/playbook/catalogs/org/attic/resources', headers: writer });
    const attic = (listed.json().data as { id: string }[]).map((item) => item.id);
    expect(attic).toHaveLength(2);
    await builder.buildAll();
    expect((await Promise.all(attic.map(storedRow))).every(Boolean)).toBe(true);
    // The builder starts following only once the deletion is seen: a poll of the log between the
    // write's answer and these reads would have it write the rows again first.
    const archived = await app.inject({
      method: 'DELETE',
      url: '/v3/playbook/catalogs/org/attic',
      headers: writer,
    });
    expect(archived.statusCode).toBe(204);
    for (const id of attic) expect(await storedRow(id)).toBeUndefined();
    builder.start(side.follower);
    await followNow();
    await waitFor('the archived Catalog stored again', async () =>
      (await Promise.all(attic.map(storedRow))).every(Boolean),
    );
    for (const id of attic) {
      const stored = await app.inject({ url: detailUrl(id), headers: writer });
      expect(stored.statusCode).toBe(200);
      expect(stored.body).toBe((await fromRows(id, writer)).body);
    }
    // Following no further: the next tests' writes are theirs to follow.
    builder.stop();
    await builder.settled();
  });

  it('catches up at start with changes made by a writer that deleted no row', async () => {
    const { builder } = await withReadModel();
    await builder.buildAll();
    expect(JSON.parse((await storedRow(ids.svc!))!.body).title).toBe('Resource intro');
    // A process of an earlier release: it changes the Resource and appends its change, nothing more.
    await backend.databases.primary.transaction().execute(async (trx) => {
      await trx
        .updateTable('resources')
        .set({ title: 'Intro, renamed' })
        .where('id', '=', ids.svc!)
        .execute();
      await appendChanges(trx, { at: new Date().toISOString(), actor: { type: 'operator' } }, [
        {
          namespace: 'svc',
          type: 'resource.updated',
          target: { kind: 'resource', id: ids.svc! },
          summary: 'renamed',
        },
      ]);
    });
    expect(JSON.parse((await storedRow(ids.svc!))!.body).title).toBe('Resource intro');
    const { builder: next } = await withReadModel();
    await next.buildAll();
    const row = await storedRow(ids.svc!);
    expect(JSON.parse(row!.body).title).toBe('Intro, renamed');
    expect(row!.body).toBe((await fromRows(ids.svc!, noAccount)).body);
  });

  it('skips a Resource whose detail cannot be read, and one too large to store, and writes the others', async () => {
    const svc = await backend.databases.primary
      .selectFrom('catalogs')
      .select('id')
      .where('slug', '=', 'guides')
      .executeTakeFirstOrThrow();
    const large = await givenResource(backend, svc, {
      slug: 'large',
      versions: [{ version: '1.0.0', content: 'l'.repeat(MAX_STORED_CHARS + 1) }],
    });
    const damaged = await givenResource(backend, svc, { slug: 'damaged' });
    await tamperDatabaseText(backend, damaged.versions[0]!.contentHash, '# not what was hashed\n');
    const { builder } = await withReadModel();
    await builder.buildAll();
    expect(await storedRow(large.id)).toBeUndefined();
    expect(await storedRow(damaged.id)).toBeUndefined();
    for (const name of ['svc', 'gated', 'object', 'welcome', 'big'])
      expect(await storedRow(ids[name]!), name).toBeDefined();
  });

  it('never stores a detail read before a change to its Resource, and writes the new one', async () => {
    let raced = false;
    const { builder } = await withReadModel(async (id, side) => {
      const read = await side.playbook.ownerDetail(id);
      if (id === ids.welcome && !raced) {
        raced = true;
        // A write commits between the builder's read and its own write.
        const written = await putResource(plain, 'welcome', '1.2.0', '# Raced\n');
        expect(written.statusCode).toBe(200);
      }
      return read;
    });
    await backend.databases.primary.deleteFrom('stored_details').execute();
    await builder.buildAll();
    expect(raced).toBe(true);
    const row = await storedRow(ids.welcome!);
    // The detail read before the write was not stored; the write's change made the Resource due again.
    expect(JSON.parse(row!.body).currentVersion.content).toBe('# Raced\n');
    expect(row!.body).toBe((await fromRows(ids.welcome!, writer)).body);
  });

  it('sends no row of another form, and has it written again', async () => {
    const { app, builder, asked } = await withReadModel();
    await builder.buildAll();
    await backend.databases.primary
      .updateTable('stored_details')
      .set({ form: 'earlier', body: '{"from":"an earlier release"}' })
      .where('resource_id', '=', ids.object!)
      .execute();
    const read = await app.inject({ url: detailUrl(ids.object!), headers: free });
    expect(read.body).toBe((await fromRows(ids.object!, free)).body);
    expect(asked).toEqual([ids.object]);
    await builder.settled();
    expect(await storedRow(ids.object!)).toMatchObject({ form: STORED_DETAIL_FORM, body: read.body });
  });

  it('once started, writes what the table lacks and follows the writes', async () => {
    await backend.databases.primary.deleteFrom('stored_details').execute();
    const { app, side, builder } = await withReadModel();
    builder.start(side.follower);
    await waitFor('every visible Resource stored', async () => (await storedRow(ids.big!)) !== undefined);
    await builder.settled();
    const written = await putResource(app, 'big', '2.0.0', 'c'.repeat(70_000));
    expect(written.statusCode).toBe(200);
    await followNow();
    await waitFor('the changed Resource stored again', async () => {
      const row = await storedRow(ids.big!);
      return row !== undefined && JSON.parse(row.body).currentVersion.version === '2.0.0';
    });
    expect((await storedRow(ids.big!))?.body).toBe((await fromRows(ids.big!, writer)).body);
    builder.stop();
    await builder.settled();
  });

  it('leaves the rows as they were when a write fails before its commit', async () => {
    const { builder } = await withReadModel();
    await builder.buildAll();
    const before = await storedRow(ids.welcome!);
    expect(before).toBeDefined();
    const failing = createTestIdentity(backend, {
      beforeCommit: () => {
        throw new Error('the disk is full');
      },
    });
    const app = await buildIdentityApp(backend, failing);
    try {
      const refused = await putResource(app, 'welcome', '9.0.0', '# Never\n');
      expect(refused.statusCode).toBe(500);
      expect(await storedRow(ids.welcome!)).toEqual(before);
    } finally {
      await app.close();
      await failing.close();
    }
  });

  it('`playbook details build` writes every row the table lacks, and says how many', async () => {
    await backend.databases.primary.deleteFrom('stored_details').execute();
    const built = await runCli(['details', 'build'], backend.env);
    expect(built).toMatchObject({ code: 0, stderr: '' });
    const count = await backend.databases.primary
      .selectFrom('stored_details')
      .select((eb) => eb.fn.countAll<number | string>().as('count'))
      .executeTakeFirstOrThrow();
    // Every visible Resource of the fixtures and of the account's Catalogs, no draft.
    expect(Number(count.count)).toBeGreaterThanOrEqual(8);
    expect(built.stdout).toBe(`wrote ${Number(count.count)} stored details\n`);
    expect(await storedRow(ids.draft!)).toBeUndefined();
    expect((await storedRow(ids.gated!))?.body).toBe((await fromRows(ids.gated!, pro)).body);
    const again = await runCli(['details', 'build'], backend.env);
    expect(again.stdout).toBe('wrote 0 stored details\n');
  });
});
