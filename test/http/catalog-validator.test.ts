import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { checkProblem } from '../helpers/contract.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { followNow } from '../helpers/read-side.js';

/**
 * One Catalog's validator (its ETag, and the If-Match of its writes, D29) names the Catalog's row and
 * the last change to its namespace's Catalogs and Resources (D26), so that no Resource is read to make
 * it (D30): it must change with every write that could change the Catalog's answer or that a whole
 * Catalog's write would replace, and answer 304 until then.
 */

describe("a Catalog's validator, made without reading its Resources (D30)", () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let acmeWriter: Record<string, string>;
  let globexWriter: Record<string, string>;
  const BOOK = '/v3/playbook/catalogs/org/book';

  async function read(headers: Record<string, string>) {
    await followNow();
    return app.inject({ url: BOOK, headers });
  }

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    for (const accountId of ['acme', 'globex']) {
      const minted = await identity.mintKey({ accountId, scopes: ['playbook:read', 'playbook:write'] });
      if (accountId === 'acme') acmeWriter = minted.headers;
      else globexWriter = minted.headers;
    }
    for (const headers of [acmeWriter, globexWriter]) {
      const created = await app.inject({
        method: 'PUT',
        url: BOOK,
        headers,
        payload: { name: 'Book', version: '1', resources: [publishedResource('intro')] },
      });
      expect(created.statusCode, created.body).toBe(201);
    }
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await identity?.close();
    await backend?.cleanup();
  });

  it('changes after a publish to the Catalog, answers 304 on the new tag and 200 on the old', async () => {
    const first = await read(acmeWriter);
    expect(first.statusCode).toBe(200);
    const old = String(first.headers.etag);
    expect((await read({ ...acmeWriter, 'if-none-match': old })).statusCode).toBe(304);

    const published = await app.inject({
      method: 'PUT',
      url: BOOK,
      headers: acmeWriter,
      payload: {
        name: 'Book',
        version: '2',
        resources: [publishedResource('intro'), publishedResource('more')],
      },
    });
    expect(published.statusCode, published.body).toBe(200);
    const after = await read(acmeWriter);
    const fresh = String(after.headers.etag);
    expect(fresh).not.toBe(old);
    // The write's ETag is the read's (D29), and the read shows the new version's pins.
    expect(published.headers.etag).toBe(fresh);
    expect(after.json().currentVersion.version).toBe('2');
    expect(after.json().currentVersion.resourcePins).toHaveLength(2);
    const revalidated = await read({ ...acmeWriter, 'if-none-match': fresh });
    expect(revalidated.statusCode).toBe(304);
    expect(revalidated.body).toBe('');
    const stale = await read({ ...acmeWriter, 'if-none-match': old });
    expect(stale.statusCode).toBe(200);
    expect(stale.body).toBe(after.body);
  }, 60_000);

  it("changes after a write of one of its Resources, which a whole Catalog's If-Match must see", async () => {
    const before = String((await read(acmeWriter)).headers.etag);
    const written = await app.inject({
      method: 'PUT',
      url: `${BOOK}/resources/intro`,
      headers: acmeWriter,
      // The body of a one-Resource write names its slug in its path alone.
      payload: { ...publishedResource('intro', { version: '9', content: 'rewritten' }), slug: undefined },
    });
    expect(written.statusCode, written.body).toBe(200);
    const after = await read(acmeWriter);
    const tag = String(after.headers.etag);
    expect(tag).not.toBe(before);
    expect((await read({ ...acmeWriter, 'if-none-match': tag })).statusCode).toBe(304);
    // The Catalog's older tag no longer passes a write's If-Match; its current one does.
    const refused = await app.inject({
      method: 'POST',
      url: `${BOOK}/versions`,
      headers: { ...acmeWriter, 'if-match': before },
      payload: { version: '3' },
    });
    expect(checkProblem(refused, 412, 'precondition_failed'), refused.body).toEqual([]);
    const accepted = await app.inject({
      method: 'POST',
      url: `${BOOK}/versions`,
      headers: { ...acmeWriter, 'if-match': tag },
      payload: { version: '3' },
    });
    expect(accepted.statusCode, accepted.body).toBe(201);
    expect(String((await read(acmeWriter)).headers.etag)).toBe(accepted.headers.etag);
  }, 60_000);

  it("stays when another account publishes, and another account's Catalog of the same slug is its own", async () => {
    const mine = await read(acmeWriter);
    const tag = String(mine.headers.etag);
    const theirs = await read(globexWriter);
    expect(theirs.statusCode).toBe(200);
    expect(theirs.json().id).not.toBe(mine.json().id);
    const published = await app.inject({
      method: 'PUT',
      url: BOOK,
      headers: globexWriter,
      payload: { name: 'Book', version: '7', resources: [publishedResource('elsewhere')] },
    });
    expect(published.statusCode, published.body).toBe(200);
    expect((await read({ ...acmeWriter, 'if-none-match': tag })).statusCode).toBe(304);
  }, 60_000);
});
