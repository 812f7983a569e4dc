import { Type } from '@sinclair/typebox';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/tables.js';
import { Page, SINGLE_LINE_PATTERN } from '../../src/schemas/common.js';
import { Catalog } from '../../src/schemas/playbook.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { checkProblem } from '../helpers/contract.js';
import { clearStorage, givenAccount } from '../helpers/fixtures.js';
import { dataChanged, type ReadSide } from '../helpers/read-side.js';
import {
  askThenStopReading,
  decoded,
  get,
  givenPublished,
  liveHeapWhileReceiving,
  pinsOf,
  principalOf,
  readThenGoAway,
  StreamedReads,
  wholeSerializer,
} from '../helpers/streamed-reads.js';
import { sleep } from '../helpers/wait.js';

/**
 * The answers that carry Catalogs' pins written as they are read (D30): the catalogs list, and one
 * Catalog by its ref. A Catalog version of 100,000 pins is 20 MB of their text, which is never held
 * whole; each request is sent a stream of its own; a client that goes away stops the reading of
 * storage, one that takes nothing holds its own answer only; and the bytes are those of the whole value
 * serialized by the route's schema, as the answer was made before it was streamed.
 */

const LIST = '/v3/playbook/catalogs';
const BIG_REF = '/v3/playbook/catalogs/svc/big';
const SMALL_REF = '/v3/playbook/catalogs/svc/alpha';
const MINE_REF = '/v3/playbook/catalogs/org/mine';
const acme = { 'x-api-key': 'acme' };
const BIG = 100_000;

describe('answers of Catalogs, written as they are read (D30)', () => {
  let backend: TestBackend;
  let db: Db;
  let harness: StreamedReads;
  let counted: { readonly pinReads: number };
  let serializeWhole: (page: unknown) => Promise<string>;
  let serializeCatalog: (catalog: unknown) => Promise<string>;
  const serve = (...options: Parameters<StreamedReads['serve']>) => harness.serve(...options);

  /** The page as the whole-value read side sees it, serialized at once: the bytes the list must send. */
  async function expectedList(reads: ReadSide, accountId: string | null): Promise<string> {
    return serializeWhole((await reads.playbook.listCatalogs(principalOf(accountId), {})).value);
  }

  /** One Catalog as the whole-value read side sees it (in the list), serialized at once. */
  async function expectedCatalog(reads: ReadSide, slug: string): Promise<string> {
    const page = await reads.playbook.listCatalogs(principalOf('acme'), { pageSize: 100 });
    const catalog = page.value.data.find((each) => each.slug === slug);
    expect(catalog).toBeDefined();
    return serializeCatalog(catalog);
  }

  beforeAll(async () => {
    backend = await createTestBackend();
    db = backend.databases.primary;
    harness = new StreamedReads(backend);
    counted = harness.counted;
    serializeWhole = await wholeSerializer(Page(Type.Ref(Catalog)));
    serializeCatalog = await wholeSerializer(Type.Ref(Catalog));
    await givenAccount(db, 'acme');
    await givenAccount(db, 'globex');
    await givenPublished(db, null, 'alpha', pinsOf('svc', 'alpha', 3), 'Alpha "resourcePins":[] — ünïcødé');
    await givenPublished(db, null, 'big', pinsOf('svc', 'big', BIG));
    await givenPublished(
      db,
      'acme',
      'mine',
      pinsOf('org', 'mine', 2, (i) => `v"${i}"}{ ✓`),
    );
    await dataChanged(db);
  }, 120_000);

  afterAll(async () => {
    await harness?.close();
    await backend?.cleanup();
  });

  describe.each([
    { what: 'the catalogs list', path: LIST, expected: (reads: ReadSide) => expectedList(reads, 'acme') },
    {
      what: 'the 100,000-pin Catalog by its ref',
      path: BIG_REF,
      expected: (reads: ReadSide) => expectedCatalog(reads, 'big'),
    },
  ])('$what', ({ path, expected: expectedOf }) => {
    it('sends, in every encoding, the bytes the whole value serialized at once would be, chunked, with one validator', async () => {
      const { port, reads } = await serve();
      const expected = await expectedOf(reads);
      expect(expected.length).toBeGreaterThan(20_000_000);
      const identity = await get(port, path, acme);
      expect(identity.status).toBe(200);
      expect(identity.headers['transfer-encoding']).toBe('chunked');
      expect(identity.headers['content-length']).toBeUndefined();
      expect(identity.body.toString()).toBe(expected);
      const etag = String(identity.headers.etag);
      for (const encoding of ['br', 'gzip']) {
        const first = await get(port, path, { ...acme, 'accept-encoding': encoding });
        expect(first.headers['content-encoding']).toBe(encoding);
        expect(first.headers.etag).toBe(`${etag.slice(0, -1)}-${encoding}"`);
        expect(decoded(first)).toBe(expected);
        // A strong validator: the same representation is the same bytes every time it is written.
        const again = await get(port, path, { ...acme, 'accept-encoding': encoding });
        expect(again.body.equals(first.body)).toBe(true);
      }
      expect((await get(port, path, acme)).headers.etag).toBe(etag);
    }, 120_000);

    it('answers a revalidation and HEAD without reading any pin, on an instance that holds nothing too', async () => {
      const { port } = await serve();
      const etag = String((await get(port, path, acme)).headers.etag);
      const before = counted.pinReads;
      const revalidated = await get(port, path, { ...acme, 'if-none-match': etag });
      expect(revalidated.status).toBe(304);
      expect(revalidated.body.length).toBe(0);
      const head = await get(port, path, acme, 'HEAD');
      expect(head.status).toBe(200);
      expect(head.headers.etag).toBe(etag);
      expect(head.body.length).toBe(0);
      const fresh = await serve();
      expect((await get(fresh.port, path, { ...acme, 'if-none-match': etag })).status).toBe(304);
      expect(counted.pinReads).toBe(before);
    }, 60_000);

    it('holds a bounded amount of memory while 100,000 pins are sent, first read or not', async () => {
      const { port } = await serve();
      // Nothing is held yet: the first read makes what the answer keeps (its text without pins).
      const cold = await liveHeapWhileReceiving(port, path, acme);
      const warm = await liveHeapWhileReceiving(port, path, acme);
      expect(cold.received).toBeGreaterThan(20_000_000);
      expect(warm.received).toBe(cold.received);
      // The stated bound, heap and buffers: a stream holds a part of stored pins (64 Ki characters), a
      // block or two, a run being compressed and what the socket has not taken: far
      // less than 16 MiB, where the answer whole is 20 MB as bytes (kept, once made) and more than
      // twice that as a string.
      expect(cold.peak).toBeLessThan(16 * 1024 * 1024);
      expect(warm.peak).toBeLessThan(16 * 1024 * 1024);
    }, 120_000);

    it('stops reading storage when the client goes away', async () => {
      const { port } = await serve();
      const full = counted.pinReads;
      await get(port, path, acme);
      const wholeRead = counted.pinReads - full;
      expect(wholeRead).toBeGreaterThan(10);
      // An instance that holds nothing yet: what it reads for the request is all the request costs.
      const fresh = await serve();
      const before = counted.pinReads;
      await readThenGoAway(fresh.port, path, acme, 2 * 1024 * 1024);
      await sleep(200);
      const atCancel = counted.pinReads;
      await sleep(500);
      expect(counted.pinReads).toBe(atCancel);
      expect(atCancel - before).toBeLessThan(wholeRead / 2);
      // And the instance answers again, whole.
      expect((await get(fresh.port, path, acme)).body.length).toBeGreaterThan(20_000_000);
    }, 120_000);

    it('sends requests that arrive together the same bytes, each from a stream of its own', async () => {
      const alone = await serve();
      const before = counted.pinReads;
      const single = await get(alone.port, path, acme);
      const oneStream = counted.pinReads - before;
      // Five callers ask an instance that holds nothing yet, in the same moment (the answer just
      // changed, say): they wait for one read of its text, then each reads the pins for its own stream.
      const fresh = await serve();
      const beforeFive = counted.pinReads;
      const together = await Promise.all(
        Array.from({ length: 5 }, () => fresh.app.inject({ url: path, headers: acme })),
      );
      for (const answer of together) expect(answer.rawPayload.equals(single.body)).toBe(true);
      expect(counted.pinReads - beforeFive).toBe(5 * oneStream);
    }, 120_000);
  });

  it('closes the connection of a client that takes nothing for the request timeout; the others are sent theirs at once (D20)', async () => {
    const requestMs = 1_000;
    const alone = await serve();
    const whole = await get(alone.port, LIST, acme);
    // Two callers ask an instance that holds nothing yet, together: one stops taking its answer, and
    // holds its own stream only.
    const fresh = await serve(undefined, { requestMs, keepAliveMs: 72_000 });
    const startedAt = performance.now();
    const stalled = askThenStopReading(fresh.port, LIST, acme);
    try {
      const sent = await get(fresh.port, LIST, acme);
      expect(sent.status).toBe(200);
      expect(sent.body.equals(whole.body)).toBe(true);
      expect(performance.now() - startedAt).toBeLessThan(requestMs);
      // The other's answer is cut short once it has taken nothing for the request timeout: its
      // connection is closed, with its headers and part of the body. A socket that reads nothing
      // cannot see it close: it reads again once that time has passed.
      await sleep(requestMs + 500);
      const cutShort = await stalled.readRest();
      expect(cutShort).toBeGreaterThan(0);
      expect(cutShort).toBeLessThan(whole.body.length);
      expect(performance.now() - startedAt).toBeGreaterThanOrEqual(requestMs);
    } finally {
      stalled.stop();
    }
  }, 60_000);

  it('sends a small Catalog by its ref whole, held or not, as the bytes of the whole Catalog serialized at once', async () => {
    const held = await serve();
    const unheld = await serve(0);
    for (const [ref, slug] of [
      [SMALL_REF, 'alpha'],
      [MINE_REF, 'mine'],
    ] as const) {
      const expected = await expectedCatalog(held.reads, slug);
      for (const { port } of [held, unheld]) {
        const answer = await get(port, ref, acme);
        expect(answer.status).toBe(200);
        expect(answer.headers['content-length']).toBe(String(Buffer.byteLength(expected)));
        expect(answer.body.toString()).toBe(expected);
      }
    }
  }, 60_000);

  it("answers 404 for another account's Catalog by its ref, and for no account's, reading no pin", async () => {
    const { app } = await serve();
    const before = counted.pinReads;
    for (const caller of ['globex', 'nobody']) {
      const answer = await app.inject({ url: MINE_REF, headers: { 'x-api-key': caller } });
      expect(checkProblem(answer, 404, 'not_found'), answer.body).toEqual([]);
      expect(answer.body).not.toContain('resourcePins');
    }
    expect(counted.pinReads).toBe(before);
    // The owner's read is not the others': it answers the Catalog.
    expect((await app.inject({ url: MINE_REF, headers: acme })).statusCode).toBe(200);
  }, 60_000);

  it('writes, for any data, the bytes of the whole page serialized at once, held or streamed', async () => {
    const singleLine = new RegExp(SINGLE_LINE_PATTERN, 'u');
    const label = fc.string({ unit: 'binary', minLength: 1, maxLength: 12 }).filter((text) => {
      // A version label is one line of well-formed text (D21).
      return singleLine.test(text);
    });
    const name = fc
      .string({ unit: 'grapheme', minLength: 1, maxLength: 40 })
      .filter((text) => text.trim() !== '');
    const streamed = await serve(0);
    const held = await serve();
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            name,
            count: fc.integer({ min: 0, max: 4 }),
            labels: fc.array(label, { minLength: 1, maxLength: 5 }),
          }),
          {
            minLength: 1,
            maxLength: 4,
          },
        ),
        label,
        async (catalogs, bigLabel) => {
          await clearStorage(db);
          await givenAccount(db, 'acme');
          for (const [index, catalog] of catalogs.entries()) {
            const slug = `c${index}`;
            const pins = pinsOf(
              'org',
              slug,
              catalog.count,
              (i) => catalog.labels[i % catalog.labels.length]!,
            );
            await givenPublished(db, index % 2 === 0 ? 'acme' : null, slug, pins, catalog.name);
          }
          // One version large enough to be written as it is read where nothing is held.
          await givenPublished(
            db,
            null,
            'large',
            pinsOf('svc', 'large', 1500, () => bigLabel),
            'Large',
          );
          await dataChanged(db);
          const expected = await expectedList(held.reads, 'acme');
          const fromStream = await get(streamed.port, LIST, acme);
          expect(fromStream.headers['transfer-encoding']).toBe('chunked');
          expect(fromStream.body.toString()).toBe(expected);
          expect((await get(held.port, LIST, acme)).body.toString()).toBe(expected);
          const page = `${LIST}?pageSize=1&page=2`;
          expect((await get(streamed.port, page, acme)).body.toString()).toBe(
            await serializeWhole(
              (await held.reads.playbook.listCatalogs(principalOf('acme'), { pageSize: 1, page: 2 })).value,
            ),
          );
        },
      ),
      { numRuns: 15 },
    );
  }, 300_000);
});
