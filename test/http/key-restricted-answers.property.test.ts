import http from 'node:http';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { MemoryReads } from '../../src/routes/memory-reads.js';
import type { KeyRestrictionsInput } from '../../src/schemas/identity.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { type ReadSide, readSide } from '../helpers/read-side.js';
import { importService, listAll, resourceFile } from '../helpers/sync-feed.js';

/**
 * D32 as a property: whatever the order in which keys of one account read, a restricted key and an
 * unrestricted one (or two keys restricted otherwise) never get an answer held in memory for the
 * other. Every answer of a service that keeps answers is the answer of one that keeps none.
 */

const KEYS: Record<string, KeyRestrictionsInput | undefined> = {
  everything: undefined,
  runbooks: { catalogs: ['org/runbooks'] },
  'guides and handbook': { catalogs: ['svc/guides', 'org/handbook'] },
  'the account': { catalogs: ['org/*'] },
  'by address': { allowedIps: ['127.0.0.0/8'] },
};

/** A GET sent over a socket as given, where the fast path for reads held in memory may take it. */
function overSocket(
  url: string,
  headers: Record<string, string>,
): Promise<{ statusCode: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({ statusCode: response.statusCode ?? 0, body: Buffer.concat(chunks).toString() }),
        );
        response.on('error', reject);
      })
      .on('error', reject);
  });
}

/** An answer as compared: a problem's request id is its own. */
function answerOf(response: { statusCode: number; body: string }): { status: number; body: string } {
  if (response.statusCode < 400) return { status: response.statusCode, body: response.body };
  const { requestId: _requestId, ...problem } = JSON.parse(response.body) as Record<string, unknown>;
  return { status: response.statusCode, body: JSON.stringify(problem) };
}

describe('answers held in memory per restriction set (D32)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  /** Keeps answers; cleared before each sequence. */
  let app: FastifyInstance;
  let reads: ReadSide;
  /** Keeps none: every answer is made for its request. */
  let reference: FastifyInstance;
  const headers: Record<string, Record<string, string>> = {};
  const urls: string[] = [];
  /** Where `app` listens: half the reads go over a socket, where the fast path answers what it holds. */
  let base: string;
  const taken = vi.spyOn(MemoryReads.prototype, 'handle');

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    reads = await readSide(backend.databases.reader, backend.content);
    app = await buildIdentityApp(backend, identity, undefined, { reads });
    reference = await buildIdentityApp(backend, identity, undefined, {
      reads: await readSide(backend.databases.reader, backend.content, { answerCacheBytes: 0 }),
    });
    base = await listenLocally(app);
    await givenAccount(backend.databases.primary, 'acme');
    await importService(backend, identity, {
      guides: { catalog: { name: 'Guides', version: '1' }, resources: { intro: resourceFile('intro') } },
      extra: { catalog: { name: 'Extra', version: '1' }, resources: { tips: resourceFile('tips') } },
    });
    const writer = await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] });
    for (const slug of ['runbooks', 'handbook']) {
      const response = await app.inject({
        method: 'PUT',
        url: `/v3/playbook/catalogs/org/${slug}`,
        headers: writer.headers,
        payload: { name: slug, version: '1', resources: [publishedResource(`${slug}-page`)] },
      });
      expect(response.statusCode, response.body).toBe(201);
    }
    urls.push(
      '/v3/playbook/catalogs',
      '/v3/playbook/catalogs?sourceScope=svc',
      '/v3/playbook/catalogs?pageSize=1&page=2',
    );
    for (const catalog of await listAll(app, writer.headers, '/v3/playbook/catalogs')) {
      const ref = `/v3/playbook/catalogs/${catalog.owner}/${catalog.slug}`;
      urls.push(ref, `${ref}/resources`);
      for (const resource of await listAll(app, writer.headers, `${ref}/resources`)) {
        const id = resource.id as string;
        const version = (resource.currentVersion as { id: string }).id;
        urls.push(
          `${ref}/resources/${resource.slug}`,
          `/v3/playbook/resources/${id}`,
          `/v3/playbook/resources/${id}/versions`,
          `/v3/playbook/resources/${id}/versions/${version}`,
        );
      }
    }
    for (const [name, restrictions] of Object.entries(KEYS)) {
      const key = await identity.mintKey({
        accountId: 'acme',
        ...(restrictions === undefined ? {} : { restrictions }),
      });
      headers[name] = key.headers;
    }
  });
  afterAll(async () => {
    taken.mockRestore();
    await app.close();
    await reference.close();
    await identity.close();
    await backend.cleanup();
  });

  it('every answer is the one a service keeping none would give, whatever the order of the reads', async () => {
    const expected = new Map<string, { status: number; body: string }>();
    for (const key of Object.keys(KEYS)) {
      for (const url of urls) {
        const response = await reference.inject({ url, headers: headers[key]! });
        expected.set(`${key} ${url}`, answerOf(response));
      }
    }
    // The keys do see different things: otherwise the property would hold of any cache.
    const statuses = new Set([...expected.values()].map((answer) => answer.status));
    expect([...statuses].sort()).toEqual([200, 404]);

    const read = fc.record({
      key: fc.constantFrom(...Object.keys(KEYS)),
      url: fc.constantFrom(...urls),
      socket: fc.boolean(),
    });
    let fast = 0;
    await fc.assert(
      fc.asyncProperty(
        // Rounds of reads, each round sent at once (requests for one answer share its making).
        fc.array(fc.array(read, { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 12 }),
        async (rounds) => {
          reads.cache.clear();
          for (const round of rounds) {
            const responses = await Promise.all(
              round.map(({ key, url, socket }) =>
                socket
                  ? overSocket(`${base}${url}`, headers[key]!)
                  : app.inject({ url, headers: headers[key]! }),
              ),
            );
            fast += taken.mock.results.filter((result) => result.value === true).length;
            taken.mockClear();
            round.forEach(({ key, url }, index) => {
              const response = responses[index]!;
              expect(answerOf(response), `${key} ${url}`).toEqual(expected.get(`${key} ${url}`));
            });
          }
        },
      ),
      { numRuns: 60 },
    );
    // The fast path answered its share: the property holds of it too.
    expect(fast).toBeGreaterThan(20);
  });
});
