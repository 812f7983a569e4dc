import zlib from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tagOf } from '../../src/http/answer.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { givenPublished, pinsOf } from '../helpers/streamed-reads.js';
import { listed, Mirror, syncRequest, syncToEnd } from '../helpers/sync-feed.js';

/**
 * D27, D30 on both stacks: a Catalog whose pins are stored in many parts is sent by an initial sync
 * exactly as the Catalogs list shows it, its parts written one after the other into the page's bytes,
 * whatever their characters (a part may end anywhere between two characters).
 */
describe('an initial sync of a Catalog of many pins (D27, D30)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let acme: Record<string, string>;
  // Versions of two, three and four bytes a character, so that parts end beside multi-byte ones.
  const pins = pinsOf('org', 'big', 4_000, (i) => `1.${i}-é€😀`);

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    const db = backend.databases.primary;
    await givenAccount(db, 'acme');
    acme = (await identity.mintKey({ accountId: 'acme' })).headers;
    await givenPublished(db, 'acme', 'big', pins, 'Big');
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  it('sends its pins as they are stored, the Catalog as the list shows it, on a page of valid JSON', async () => {
    const parts = await backend.databases.primary
      .selectFrom('catalog_version_pins')
      .select((eb) => eb.fn.countAll<number>().as('count'))
      .executeTakeFirstOrThrow();
    expect(Number(parts.count)).toBeGreaterThan(4);

    const first = await syncRequest(app, acme, {});
    expect(first.statusCode).toBe(200);
    // The page's bytes are its text's UTF-8, sized exactly: a byte lost or left over at a part's end
    // would not parse.
    expect(Buffer.from(first.body).equals(first.rawPayload)).toBe(true);
    expect(JSON.parse(first.body)).toMatchObject({ data: [{ type: 'catalog' }] });

    const synced = await syncToEnd(app, acme);
    const catalog = synced.items.find((item) => item.type === 'catalog' && item.catalog?.slug === 'big');
    expect(catalog?.catalog).toMatchObject({ currentVersion: { resourcePins: pins } });
    const mirror = new Mirror();
    mirror.apply(synced.items);
    expect(mirror.catalogs).toEqual((await listed(app, acme)).catalogs);
  });

  it('writes a page of many pins as it is read: one validator known before its bytes, every encoding the same text', async () => {
    const identity = await syncRequest(app, acme, {});
    const etag = identity.headers.etag as string;
    expect(etag).toMatch(/^"[\w-]+"$/);
    // Streamed, it is chunked, and its validator is not its bytes' digest (known before them).
    expect(identity.headers['content-length']).toBeUndefined();
    expect(etag).not.toBe(`"${tagOf(identity.rawPayload)}"`);
    for (const encoding of ['br', 'gzip'] as const) {
      const compressed = await syncRequest(app, { ...acme, 'accept-encoding': encoding }, {});
      expect(compressed.headers['content-encoding']).toBe(encoding);
      expect(compressed.headers.etag).toBe(`${etag.slice(0, -1)}-${encoding}"`);
      const decoded =
        encoding === 'br'
          ? zlib.brotliDecompressSync(compressed.rawPayload)
          : zlib.gunzipSync(compressed.rawPayload);
      expect(decoded.equals(identity.rawPayload)).toBe(true);
      const again = await syncRequest(app, { ...acme, 'accept-encoding': encoding }, {});
      expect(again.rawPayload.equals(compressed.rawPayload)).toBe(true);
    }
    const revalidated = await syncRequest(app, { ...acme, 'if-none-match': etag }, {});
    expect(revalidated.statusCode).toBe(304);
  });
});
