import zlib from 'node:zlib';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { type GivenResource, givenCatalog, givenResource } from '../helpers/fixtures.js';

/**
 * D11 (revised) and D19: one validator and one set of cache directives on every successful read, 304
 * on a matching If-None-Match on GET and HEAD alike, and compression with a strong ETag per encoding.
 */

const REVALIDATE = 'private, no-cache';
const VARY = 'x-api-key, authorization, x-account-id, accept-encoding';
const STRONG_ETAG = /^"[\x21\x23-\x7e]+"$/;

describe('caching (D11, D19)', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  const principals = new PrincipalRegistry();
  let headers: Record<string, string>;
  let doc: GivenResource;
  let gated: GivenResource;
  let tiny: GivenResource;

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, principals);
    headers = await principals.register({ accountId: null, plan: 'free', scopes: ['playbook:read'] });
    // Long enough that every answer about it passes D19's 1 KiB.
    const handbook = await givenCatalog(backend.databases.primary, {
      slug: 'handbook',
      description: 'How we work. '.repeat(70),
    });
    doc = await givenResource(backend, handbook, {
      slug: 'doc',
      versions: [
        { version: '1', content: `first ${'words '.repeat(400)}` },
        // Enough versions that the history passes 1 KiB too.
        { version: '1.1', content: 'one' },
        { version: '1.2', content: 'two' },
        { version: '1.3', content: 'three' },
        { version: '2', content: `second ${'lines\n'.repeat(20_000)}`, storage: 'object-storage' },
      ],
    });
    gated = await givenResource(backend, handbook, { slug: 'gated', facets: { planAccess: ['pro'] } });
    const small = await givenCatalog(backend.databases.primary, { slug: 'small' });
    tiny = await givenResource(backend, small, { slug: 't', versions: [{ version: '1', content: 'x' }] });
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  const get = (url: string, extra: Record<string, string> = {}, method: 'GET' | 'HEAD' = 'GET') =>
    app.inject({ method, url, headers: { ...headers, ...extra } });
  const versionUrl = (r: GivenResource, versionId: string) =>
    `/v3/playbook/resources/${r.id}/versions/${versionId}`;

  function expectNotModified(res: LightMyRequestResponse, etag: string) {
    expect(res.statusCode).toBe(304);
    expect(res.body).toBe('');
    // RFC 9110 §15.4.5 and §8.6: no representation metadata, and no Content-Length that differs
    // from the full answer's (the length of an empty 304 body would).
    expect(res.headers['content-type']).toBeUndefined();
    expect(res.headers['content-length']).toBeUndefined();
    expect(res.headers['content-encoding']).toBeUndefined();
    expect(res.headers.etag).toBe(etag);
    expect(res.headers['cache-control']).toBe(REVALIDATE);
    expect(res.headers.vary).toBe(VARY);
    expect(res.headers['x-request-id']).toBeTruthy();
  }

  const urls = () => [
    '/v3/playbook/catalogs',
    '/v3/playbook/catalogs/svc/handbook/resources',
    `/v3/playbook/resources/${doc.id}`,
    `/v3/playbook/resources/${doc.id}/versions`,
    versionUrl(doc, doc.versionIds[0]!),
    versionUrl(doc, doc.currentVersionId),
  ];

  describe('D11 validators', () => {
    it('D11: every read carries a strong ETag, Cache-Control private, no-cache and Vary; versions are not immutable', async () => {
      for (const url of urls()) {
        const res = await get(url);
        expect(res.statusCode, url).toBe(200);
        expect(res.headers.etag, url).toMatch(STRONG_ETAG);
        expect(res.headers['cache-control'], url).toBe(REVALIDATE);
        expect(res.headers.vary, url).toBe(VARY);
      }
    });

    it('D11: the ETag is stable across requests and differs between versions and pages', async () => {
      const [a, b] = [doc.versionIds[0]!, doc.currentVersionId];
      const first = await get(versionUrl(doc, a));
      const again = await get(versionUrl(doc, a));
      const other = await get(versionUrl(doc, b));
      expect(again.headers.etag).toBe(first.headers.etag);
      expect(other.headers.etag).not.toBe(first.headers.etag);
      const one = await get('/v3/playbook/catalogs?pageSize=1&page=1');
      const two = await get('/v3/playbook/catalogs?pageSize=1&page=2');
      expect(one.headers.etag).not.toBe(two.headers.etag);
    });

    it.each([
      ['the exact ETag', (etag: string) => etag],
      ['a list holding it', (etag: string) => `"nope", ${etag}, "other"`],
      ['a list without spaces', (etag: string) => `"nope",${etag}`],
      ['its weak form', (etag: string) => `W/${etag}`],
      ['*', () => '*'],
    ])('D11: If-None-Match with %s gives 304 with no body, on GET and on HEAD', async (_why, make) => {
      for (const url of urls()) {
        const etag = String((await get(url)).headers.etag);
        expectNotModified(await get(url, { 'if-none-match': make(etag) }), etag);
        expectNotModified(await get(url, { 'if-none-match': make(etag) }, 'HEAD'), etag);
      }
    });

    it('D11: a non-matching If-None-Match gives the full answer', async () => {
      const url = versionUrl(doc, doc.versionIds[0]!);
      const res = await get(url, { 'if-none-match': '"something-else", W/"another"' });
      expect(res.statusCode).toBe(200);
      expect(res.json().content).toMatch(/^first /);
      const [a, b] = [doc.versionIds[0]!, doc.currentVersionId];
      const etagOfA = String((await get(versionUrl(doc, a))).headers.etag);
      expect((await get(versionUrl(doc, b), { 'if-none-match': etagOfA })).statusCode).toBe(200);
    });

    it('D11: HEAD answers the headers of GET, its Content-Length included, without a body', async () => {
      for (const url of urls()) {
        const encodings: Record<string, string>[] = [
          {},
          { 'accept-encoding': 'br' },
          { 'accept-encoding': 'gzip' },
        ];
        for (const encoding of encodings) {
          const full = await get(url, encoding);
          const head = await get(url, encoding, 'HEAD');
          expect(head.statusCode, url).toBe(200);
          expect(head.body, url).toBe('');
          for (const name of ['etag', 'cache-control', 'vary', 'content-type', 'content-encoding']) {
            expect(head.headers[name], `${url} ${name}`).toBe(full.headers[name]);
          }
          expect(head.headers['content-length'], url).toBe(String(full.rawPayload.length));
        }
      }
    });

    it('D11: the list ETag changes when what the list shows changes', async () => {
      const before = String((await get('/v3/playbook/catalogs')).headers.etag);
      await givenCatalog(backend.databases.primary, { slug: 'added-later' });
      const after = await get('/v3/playbook/catalogs', { 'if-none-match': before });
      expect(after.statusCode).toBe(200);
      expect(after.headers.etag).not.toBe(before);
    });
  });

  describe('D19 compression', () => {
    const decoders = {
      br: (bytes: Buffer) => zlib.brotliDecompressSync(bytes),
      gzip: (bytes: Buffer) => zlib.gunzipSync(bytes),
    };

    it.each([
      ['br', 'br'],
      ['gzip', 'gzip'],
      ['br, gzip', 'br'],
      ['gzip, br', 'br'],
      ['gzip;q=1, br;q=0.5', 'gzip'],
      ['br;q=0, gzip', 'gzip'],
      ['*', 'br'],
      ['deflate, gzip', 'gzip'],
    ] as const)('D19: Accept-Encoding %s is answered in %s', async (accept, expected) => {
      for (const url of urls()) {
        const plain = await get(url);
        const res = await get(url, { 'accept-encoding': accept });
        expect(res.statusCode, url).toBe(200);
        expect(res.headers['content-encoding'], url).toBe(expected);
        expect(res.headers['content-type'], url).toBe('application/json; charset=utf-8');
        expect(res.rawPayload.length, url).toBeLessThan(plain.rawPayload.length);
        expect(decoders[expected](res.rawPayload).toString('utf8'), url).toBe(plain.body);
      }
    });

    it.each([['identity'], ['deflate'], ['br;q=0, gzip;q=0'], ['']])(
      'D19: Accept-Encoding "%s" is answered uncompressed',
      async (accept) => {
        const url = `/v3/playbook/resources/${doc.id}`;
        const plain = await get(url);
        const res = await get(url, { 'accept-encoding': accept });
        expect(res.headers['content-encoding']).toBeUndefined();
        expect(res.body).toBe(plain.body);
        expect(res.headers.etag).toBe(plain.headers.etag);
      },
    );

    it('D19: each encoding is its own representation: its own strong ETag, and 304 for each', async () => {
      for (const url of urls()) {
        const etags = new Map<string, string>();
        for (const encoding of ['identity', 'br', 'gzip']) {
          etags.set(encoding, String((await get(url, { 'accept-encoding': encoding })).headers.etag));
        }
        expect(new Set(etags.values()).size, url).toBe(3);
        for (const [encoding, etag] of etags) {
          expect(etag, url).toMatch(STRONG_ETAG);
          expectNotModified(await get(url, { 'accept-encoding': encoding, 'if-none-match': etag }), etag);
          expectNotModified(
            await get(url, { 'accept-encoding': encoding, 'if-none-match': etag }, 'HEAD'),
            etag,
          );
          // Another representation's validator does not match this one.
          for (const [other, otherEtag] of etags) {
            if (other === encoding) continue;
            const res = await get(url, { 'accept-encoding': encoding, 'if-none-match': otherEtag });
            expect(res.statusCode, `${url} ${encoding} with ${other}'s ETag`).toBe(200);
          }
        }
      }
    });

    it('D19: an answer under 1 KiB is sent as it is, one representation whatever the request accepts', async () => {
      const url = `/v3/playbook/resources/${tiny.id}/versions/${tiny.currentVersionId}`;
      const plain = await get(url);
      expect(plain.rawPayload.length).toBeLessThan(1024);
      for (const accept of ['br', 'gzip']) {
        const res = await get(url, { 'accept-encoding': accept });
        expect(res.headers['content-encoding']).toBeUndefined();
        expect(res.headers.etag).toBe(plain.headers.etag);
        expect(res.body).toBe(plain.body);
      }
    });

    it('D19: an answer kept in memory is compressed once, not per request', async () => {
      const handbook = await givenCatalog(backend.databases.primary, { slug: 'once' });
      const fresh = `/v3/playbook/resources/${(await givenResource(backend, handbook, { slug: 'r', versions: [{ version: '1', content: 'c'.repeat(4000) }] })).id}`;
      const brotli = vi.spyOn(zlib, 'brotliCompressSync');
      const gzip = vi.spyOn(zlib, 'gzipSync');
      try {
        for (let i = 0; i < 3; i++) {
          expect((await get(fresh, { 'accept-encoding': 'br' })).headers['content-encoding']).toBe('br');
          expect((await get(fresh, { 'accept-encoding': 'gzip' })).headers['content-encoding']).toBe('gzip');
        }
        expect(brotli).toHaveBeenCalledTimes(1);
        expect(gzip).toHaveBeenCalledTimes(1);
      } finally {
        brotli.mockRestore();
        gzip.mockRestore();
      }
    });
  });

  describe('D11 errors are not cached', () => {
    it.each([
      ['404', () => versionUrl(doc, '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b'), 404],
      ['400', () => versionUrl(doc, 'nope'), 400],
      ['403 plan', () => versionUrl(gated, gated.currentVersionId), 403],
      ['403 plan on the detail', () => `/v3/playbook/resources/${gated.id}`, 403],
      ['400 list', () => '/v3/playbook/catalogs?page=0', 400],
    ])(
      'D11: a %s carries no ETag, Cache-Control no-store, and If-None-Match * does not turn it into a 304',
      async (_why, url, status) => {
        const variants: Record<string, string>[] = [{}, { 'if-none-match': '*' }];
        for (const extra of variants) {
          const res = await get(url(), extra);
          expect(res.statusCode).toBe(status);
          expect(res.headers.etag).toBeUndefined();
          expect(res.headers['cache-control']).toBe('no-store');
        }
      },
    );

    it('D11: a 401 is not cached and not a 304', async () => {
      const res = await app.inject({
        url: versionUrl(doc, doc.currentVersionId),
        headers: { 'if-none-match': '*' },
      });
      expect(res.statusCode).toBe(401);
      expect(res.headers.etag).toBeUndefined();
      expect(res.headers['cache-control']).toBe('no-store');
    });

    it('D11: a matching ETag does not get past the plan gate', async () => {
      const pro = await principals.register({
        accountId: 'pro-account',
        plan: 'pro',
        scopes: ['playbook:read'],
      });
      const url = versionUrl(gated, gated.currentVersionId);
      const etag = String((await app.inject({ url, headers: pro })).headers.etag);
      const res = await get(url, { 'if-none-match': etag });
      expect(res.statusCode).toBe(403);
    });
  });
});
