import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { type GivenResource, givenCatalog, givenResource } from '../helpers/fixtures.js';

/** D11: validators and cache directives on every successful read, 304 on a matching If-None-Match. */

const IMMUTABLE = 'private, max-age=31536000, immutable';
const REVALIDATE = 'private, no-cache';
const STRONG_ETAG = /^"[\x21\x23-\x7e]+"$/;

describe('caching (D11)', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  const principals = new PrincipalRegistry();
  let headers: Record<string, string>;
  let doc: GivenResource;
  let gated: GivenResource;

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, principals);
    headers = await principals.register({ accountId: null, plan: 'free', scopes: ['playbook:read'] });
    const handbook = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    doc = await givenResource(backend, handbook, {
      slug: 'doc',
      versions: [
        { version: '1', content: 'first' },
        { version: '2', content: 'second', storage: 'object-storage' },
      ],
    });
    gated = await givenResource(backend, handbook, { slug: 'gated', facets: { planAccess: ['pro'] } });
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  const get = (url: string, extra: Record<string, string> = {}) =>
    app.inject({ url, headers: { ...headers, ...extra } });
  const versionUrl = (r: GivenResource, versionId: string) =>
    `/v3/playbook/resources/${r.id}/versions/${versionId}`;

  function expectNotModified(res: LightMyRequestResponse, etag: string, cacheControl: string) {
    expect(res.statusCode).toBe(304);
    expect(res.body).toBe('');
    // RFC 9110 §15.4.5 and §8.6: no representation metadata, and no Content-Length that differs
    // from the full answer's (the length of an empty 304 body would).
    expect(res.headers['content-type']).toBeUndefined();
    expect(res.headers['content-length']).toBeUndefined();
    expect(res.headers.etag).toBe(etag);
    expect(res.headers['cache-control']).toBe(cacheControl);
    expect(res.headers['x-request-id']).toBeTruthy();
  }

  describe('D11 Resource Versions', () => {
    it('D11: a version answer carries a strong ETag and Cache-Control private, max-age=31536000, immutable', async () => {
      for (const versionId of doc.versionIds) {
        const res = await get(versionUrl(doc, versionId));
        expect(res.statusCode).toBe(200);
        expect(res.headers.etag).toMatch(STRONG_ETAG);
        expect(res.headers['cache-control']).toBe(IMMUTABLE);
      }
    });

    it('D11: the ETag is stable across requests and differs between versions', async () => {
      const [a, b] = doc.versionIds as [string, string];
      const first = await get(versionUrl(doc, a));
      const again = await get(versionUrl(doc, a));
      const other = await get(versionUrl(doc, b));
      expect(again.headers.etag).toBe(first.headers.etag);
      expect(other.headers.etag).not.toBe(first.headers.etag);
    });

    it.each([
      ['the exact ETag', (etag: string) => etag],
      ['a list holding it', (etag: string) => `"nope", ${etag}, "other"`],
      ['a list without spaces', (etag: string) => `"nope",${etag}`],
      ['its weak form', (etag: string) => `W/${etag}`],
      ['*', () => '*'],
    ])('D11: If-None-Match with %s gives 304 with no body', async (_why, make) => {
      const url = versionUrl(doc, doc.currentVersionId);
      const etag = String((await get(url)).headers.etag);
      expectNotModified(await get(url, { 'if-none-match': make(etag) }), etag, IMMUTABLE);
    });

    it('D11: a non-matching If-None-Match gives the full answer', async () => {
      const url = versionUrl(doc, doc.currentVersionId);
      const res = await get(url, { 'if-none-match': '"something-else", W/"another"' });
      expect(res.statusCode).toBe(200);
      expect(res.json().content).toBe('second');
    });

    it("D11: another version's ETag does not match", async () => {
      const [a, b] = doc.versionIds as [string, string];
      const etagOfA = String((await get(versionUrl(doc, a))).headers.etag);
      const res = await get(versionUrl(doc, b), { 'if-none-match': etagOfA });
      expect(res.statusCode).toBe(200);
    });
  });

  describe('D11 other answers', () => {
    const urls = () => [
      '/v3/playbook/catalogs',
      '/v3/playbook/catalogs/svc/handbook/resources',
      `/v3/playbook/resources/${doc.id}`,
      `/v3/playbook/resources/${doc.id}/versions`,
    ];

    it('D11: lists, the Resource detail and the history carry an ETag and Cache-Control private, no-cache', async () => {
      for (const url of urls()) {
        const res = await get(url);
        expect(res.statusCode, url).toBe(200);
        expect(res.headers.etag, url).toMatch(/^(W\/)?"[\x21\x23-\x7e]+"$/);
        expect(res.headers['cache-control'], url).toBe(REVALIDATE);
      }
    });

    it('D11: they answer 304 with no body when If-None-Match matches (exact, list, weak, *)', async () => {
      for (const url of urls()) {
        const etag = String((await get(url)).headers.etag);
        for (const candidate of [etag, `"x", ${etag}`, `W/${etag.replace(/^W\//, '')}`, '*']) {
          expectNotModified(await get(url, { 'if-none-match': candidate }), etag, REVALIDATE);
        }
        expect((await get(url, { 'if-none-match': '"stale"' })).statusCode).toBe(200);
      }
    });

    it('D11: the list ETag changes when what the list shows changes', async () => {
      const before = String((await get('/v3/playbook/catalogs')).headers.etag);
      await givenCatalog(backend.databases.primary, { slug: 'added-later' });
      const after = await get('/v3/playbook/catalogs', { 'if-none-match': before });
      expect(after.statusCode).toBe(200);
      expect(after.headers.etag).not.toBe(before);
    });

    it('D11: different pages of one list have different ETags', async () => {
      const one = await get('/v3/playbook/catalogs?pageSize=1&page=1');
      const two = await get('/v3/playbook/catalogs?pageSize=1&page=2');
      expect(one.headers.etag).not.toBe(two.headers.etag);
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
