import zlib from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PlaybookService } from '../../src/catalog/playbook-service.js';
import { representationTag } from '../../src/http/conditional.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { checkProblem, problemOf } from '../helpers/contract.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource as resource } from '../helpers/publish-bodies.js';
import { dumpStorage } from '../import/support.js';

/**
 * D29 (with D19 and D23): a read's ETag, whatever encoding it was read in, is a valid If-Match for a
 * write of the same object; a weak tag never is; entity-tag lists are read as RFC 9110 writes them;
 * and a 412 says where to read the object again.
 */

const CATALOG = '/v3/playbook/catalogs/org/conditional';
/** Content large enough that every answer of the Resource is compressed (D19: 1 KiB and more). */
const LONG = `# Long\n\n${'A paragraph of the handbook. '.repeat(200)}\n`;

describe('conditional writes (D29)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let writer: Record<string, string>;
  let resourceId: string;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    writer = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    const created = await put(CATALOG, {
      name: 'Conditional',
      version: '1',
      resources: [resource('long', { content: LONG }), resource('short')],
    });
    expect(created.statusCode, created.body).toBe(201);
    const listed = await app.inject({ url: `${CATALOG}/resources`, headers: writer });
    resourceId = (listed.json().data as { slug: string; id: string }[]).find((r) => r.slug === 'long')!.id;
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  function put(url: string, body: unknown, headers: Record<string, string> = {}) {
    return app.inject({ method: 'PUT', url, headers: { ...writer, ...headers }, payload: body as object });
  }
  /** The body of a one-Resource write: the Resource without its slug, which the path names. */
  function one(slug: string, overrides: Record<string, unknown> = {}) {
    const { slug: _slug, ...body } = resource(slug, overrides);
    return body;
  }
  const putLong = (title: string, headers: Record<string, string> = {}) =>
    put(`${CATALOG}/resources/long`, one('long', { content: LONG, title }), headers);
  /** The Resource's detail as read in `coding`, with the ETag of that representation. */
  async function readLong(coding: 'identity' | 'gzip' | 'br') {
    const answer = await app.inject({
      url: `/v3/playbook/resources/${resourceId}`,
      headers: { ...writer, 'accept-encoding': coding },
    });
    expect(answer.statusCode).toBe(200);
    expect(answer.headers['content-encoding']).toBe(coding === 'identity' ? undefined : coding);
    return { etag: String(answer.headers.etag), title: JSON.parse(decoded(answer, coding)).title as string };
  }
  function decoded(answer: { rawPayload: Buffer }, coding: string): string {
    if (coding === 'br') return zlib.brotliDecompressSync(answer.rawPayload).toString();
    if (coding === 'gzip') return zlib.gunzipSync(answer.rawPayload).toString();
    return answer.rawPayload.toString();
  }
  const tables = async () => (await dumpStorage(backend)).tables;
  /** The ETag of the Catalog's read by its human ref, in `coding`. */
  async function readCatalog(coding: 'identity' | 'gzip' | 'br'): Promise<string> {
    const answer = await app.inject({ url: CATALOG, headers: { ...writer, 'accept-encoding': coding } });
    expect(answer.statusCode).toBe(200);
    expect(answer.headers['content-encoding']).toBe(coding === 'identity' ? undefined : coding);
    return String(answer.headers.etag);
  }

  it("a read's ETag in each encoding is a valid If-Match for a write of the Resource; the write answers the next read's identity ETag", async () => {
    for (const coding of ['identity', 'gzip', 'br'] as const) {
      const read = await readLong(coding);
      const written = await putLong(`Long, read as ${coding}`, { 'if-match': read.etag });
      expect(written.statusCode, written.body).toBe(200);
      const again = await readLong('identity');
      expect(again.title).toBe(`Long, read as ${coding}`);
      // The write's ETag is the identity ETag of what it wrote: it revalidates the next read.
      expect(written.headers.etag).toBe(again.etag);
      const unchanged = await app.inject({
        url: `/v3/playbook/resources/${resourceId}`,
        headers: { ...writer, 'accept-encoding': 'identity', 'if-none-match': String(written.headers.etag) },
      });
      expect(unchanged.statusCode).toBe(304);
    }
    const identity = await readLong('identity');
    const br = await readLong('br');
    const gzip = await readLong('gzip');
    // Three representations, three strong tags, of one state.
    expect(new Set([identity.etag, br.etag, gzip.etag]).size).toBe(3);
    expect(br.etag).toBe(identity.etag.replace(/"$/, '-br"'));
    expect(gzip.etag).toBe(identity.etag.replace(/"$/, '-gzip"'));
  });

  it('412 for a stale tag, in any encoding, naming the read to make again; nothing written', async () => {
    for (const coding of ['identity', 'br'] as const) {
      const stale = await readLong(coding);
      expect((await putLong(`Moved on from ${coding}`)).statusCode).toBe(200);
      const before = await tables();
      const refused = await putLong('Overwrites unseen', { 'if-match': stale.etag });
      expect(checkProblem(refused, 412, 'precondition_failed'), refused.body).toEqual([]);
      expect(problemOf(refused).detail).toContain(`GET ${CATALOG}/resources/long`);
      expect(problemOf(refused).detail).toMatch(/read it again/i);
      expect(refused.headers.etag).toBeUndefined();
      expect(await tables()).toEqual(before);
    }
  });

  it('a weak tag never satisfies If-Match (strong comparison), even of the current state', async () => {
    const current = await readLong('identity');
    for (const weak of [`W/${current.etag}`, `W/${current.etag.replace(/"$/, '-br"')}`]) {
      const refused = await putLong('Weakly', { 'if-match': weak });
      expect(checkProblem(refused, 412, 'precondition_failed'), refused.body).toEqual([]);
      expect(problemOf(refused).detail).toMatch(/weak/);
    }
    // Not even beside a strong tag that does not match either.
    expect((await putLong('Weakly', { 'if-match': `"nope", W/${current.etag}` })).statusCode).toBe(412);
    expect((await readLong('identity')).etag).toBe(current.etag);
  });

  it('entity-tag lists as RFC 9110 writes them: commas inside quotes split nothing', async () => {
    const current = (await readLong('gzip')).etag;
    const inner = current.slice(1, -1);
    // One tag that holds the current one and a comma is not the current tag.
    for (const header of [`"${inner},x"`, `"x,${inner}"`, `"${inner},,${inner}-br"`]) {
      const refused = await putLong('Listed', { 'if-match': header });
      expect(refused.statusCode, header).toBe(412);
    }
    // A list whose tags hold commas, with the current one among them.
    const accepted = await putLong('Listed', { 'if-match': `"a,b", W/"c,d",${current} , "e"` });
    expect(accepted.statusCode, accepted.body).toBe(200);
    // A value that is no entity-tag list is a 400 naming the header, and writes nothing.
    for (const header of [inner, `${current} junk`, `*, ${current}`, 'W/', '"a" "b"']) {
      const refused = await putLong('Listed again', { 'if-match': header });
      expect(checkProblem(refused, 400, 'invalid_request'), header).toEqual([]);
      expect(problemOf(refused).errors).toEqual([
        expect.objectContaining({
          in: 'header',
          name: 'if-match',
          message: expect.stringMatching(/entity tags/),
        }),
      ]);
    }
    expect((await readLong('identity')).title).toBe('Listed');
  });

  it('If-Match: * holds for what exists; If-Match on a Resource that does not exist is 412, saying so', async () => {
    expect((await putLong('Starred', { 'if-match': '*' })).statusCode).toBe(200);
    const missing = await put(`${CATALOG}/resources/absent`, one('absent'), { 'if-match': '*' });
    expect(checkProblem(missing, 412, 'precondition_failed'), missing.body).toEqual([]);
    expect(problemOf(missing).detail).toMatch(/does not exist/);
    const listed = await app.inject({ url: `${CATALOG}/resources`, headers: writer });
    expect((listed.json().data as { slug: string }[]).map((r) => r.slug)).not.toContain('absent');
  });

  it('If-None-Match: * only creates: a Resource or a Catalog that exists is 412', async () => {
    const created = await put(`${CATALOG}/resources/fresh`, one('fresh'), { 'if-none-match': '*' });
    expect(created.statusCode, created.body).toBe(201);
    const again = await put(`${CATALOG}/resources/fresh`, one('fresh'), { 'if-none-match': '*' });
    expect(checkProblem(again, 412, 'precondition_failed'), again.body).toEqual([]);
    expect(problemOf(again).detail).toContain(`GET ${CATALOG}/resources/fresh`);
    const catalog = await put(
      CATALOG,
      { name: 'Conditional', version: '9', resources: [resource('short')] },
      { 'if-none-match': '*' },
    );
    expect(catalog.statusCode).toBe(412);
    expect(problemOf(catalog).detail).toContain(`GET ${CATALOG}`);
    // If-None-Match with the current tag (in any encoding) refuses; with another, it goes ahead.
    const current = (await readLong('br')).etag;
    expect((await putLong('Not this one', { 'if-none-match': current })).statusCode).toBe(412);
    expect((await putLong('Not this one', { 'if-none-match': '"other"' })).statusCode).toBe(200);
  });

  it("a Catalog's read ETag, in each encoding, is a valid If-Match for its writes; any write in it moves it", async () => {
    // A new label: the Resources' writes above changed what a version of the Catalog would pin.
    const body = { name: 'Conditional', version: '3' };
    const listed = await app.inject({ url: `${CATALOG}/resources?pageSize=100`, headers: writer });
    const slugs = (listed.json().data as { slug: string; status: string }[])
      .filter((r) => r.status === 'active')
      .map((r) => r.slug);
    const same = await put(CATALOG, { ...body, resources: await bodiesOf(slugs) });
    expect(same.statusCode, same.body).toBe(200);
    const etag = String(same.headers.etag);
    expect(etag).toMatch(/^"c[A-Za-z0-9_-]{32}"$/);
    // The read of the Catalog by its human ref answers the write's ETag, and each encoding's from it.
    const read = await readCatalog('identity');
    expect(read).toBe(etag);
    expect(await readCatalog('br')).toBe(etag.replace(/"$/, '-br"'));
    // The tag the read side makes is the write's whatever the read: its own service says the same.
    const row = await backend.databases.primary
      .selectFrom('catalogs')
      .selectAll()
      .where('slug', '=', 'conditional')
      .where('account_id', '=', 'acme')
      .executeTakeFirstOrThrow();
    const reads = new PlaybookService(backend.databases.reader, backend.content);
    expect(representationTag(await reads.catalogTag(row))).toBe(etag);
    // A write of one of its Resources moves the Catalog's tag: a whole-Catalog write based on the
    // older state is refused, naming the Catalog's read.
    expect((await putLong('Moved the catalog')).statusCode).toBe(200);
    const refused = await put(CATALOG, { ...body, resources: await bodiesOf(slugs) }, { 'if-match': etag });
    expect(checkProblem(refused, 412, 'precondition_failed'), refused.body).toEqual([]);
    expect(problemOf(refused).detail).toContain(`GET ${CATALOG} `);
    // The publication of a version and the archive take the current read ETag, encoded or not.
    const gzip = await readCatalog('gzip');
    const published = await app.inject({
      method: 'POST',
      url: `${CATALOG}/versions`,
      headers: { ...writer, 'if-match': gzip },
      payload: { version: '4' },
    });
    expect(published.statusCode, published.body).toBe(201);
    const stale = await app.inject({
      method: 'DELETE',
      url: CATALOG,
      headers: { ...writer, 'if-match': gzip },
    });
    expect(stale.statusCode).toBe(412);
    const archived = await app.inject({
      method: 'DELETE',
      url: CATALOG,
      headers: { ...writer, 'if-match': await readCatalog('br') },
    });
    expect(archived.statusCode, archived.body).toBe(204);
  });

  it('a 412 leads somewhere: the read it names answers the ETag that the write then takes', async () => {
    for (const [url, write] of [
      [
        `${CATALOG}/resources/short`,
        (headers: Record<string, string>) =>
          put(`${CATALOG}/resources/short`, one('short', { title: 'Again' }), headers),
      ],
      [
        CATALOG,
        (headers: Record<string, string>) =>
          put(
            CATALOG,
            { name: 'Conditional', version: '5', resources: [resource('short', { title: 'Again' })] },
            headers,
          ),
      ],
    ] as const) {
      const refused = await write({ 'if-match': '"stale"' });
      expect(refused.statusCode, url).toBe(412);
      const path = /GET (\/\S+)/.exec(problemOf(refused).detail)?.[1];
      expect(path).toBe(url);
      const read = await app.inject({ url: path!, headers: { ...writer, 'accept-encoding': 'br, gzip' } });
      expect(read.statusCode, path).toBe(200);
      const written = await write({ 'if-match': String(read.headers.etag) });
      expect(written.statusCode, written.body).toBeLessThan(300);
    }
  });

  it("a Resource's archive takes its read ETag in any encoding; a stale one is 412", async () => {
    const stale = await readLong('br');
    expect((await putLong('Before the archive')).statusCode).toBe(200);
    const refused = await app.inject({
      method: 'DELETE',
      url: `${CATALOG}/resources/long`,
      headers: { ...writer, 'if-match': stale.etag },
    });
    expect(refused.statusCode).toBe(412);
    expect(problemOf(refused).detail).toContain(`GET ${CATALOG}/resources/long`);
    const current = await readLong('gzip');
    const archived = await app.inject({
      method: 'DELETE',
      url: `${CATALOG}/resources/long`,
      headers: { ...writer, 'if-match': current.etag },
    });
    expect(archived.statusCode, archived.body).toBe(204);
  });

  /** The bodies that publish the given Resources as they are (the short ones of this suite). */
  async function bodiesOf(slugs: string[]) {
    const bodies = [];
    for (const slug of slugs) {
      if (slug === 'long') {
        bodies.push({ ...resource('long', { content: LONG }), title: (await readLong('identity')).title });
      } else {
        bodies.push(resource(slug));
      }
    }
    return bodies;
  }
});
