import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AnswerCache } from '../../src/answers/answer-cache.js';
import { ReadAnswers } from '../../src/answers/read-answers.js';
import { PlaybookService } from '../../src/catalog/playbook-service.js';
import { buildApp } from '../../src/composition/app.js';
import { InstanceState } from '../../src/routes/operations.js';
import { buildTestApp, PrincipalRegistry, unlimited } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { checkProblem } from '../helpers/contract.js';
import { type GivenResource, givenCatalog, givenResource } from '../helpers/fixtures.js';

/** D2 (problems, request ids), D17 (self-description) and D18 (health, readiness, logs). */

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('errors and operations', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  const principals = new PrincipalRegistry();
  let headers: Record<string, string>;
  let doc: GivenResource;

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, principals);
    headers = await principals.register({ accountId: null, scopes: ['playbook:read'] });
    const handbook = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    doc = await givenResource(backend, handbook, { slug: 'doc', facets: { planAccess: ['pro'] } });
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  /** What an app of these tests is built of, beside what each test sets: reads kept nowhere, no limits. */
  const appParts = () => ({
    reads: new ReadAnswers(
      new PlaybookService(backend.databases.reader, backend.content),
      new AnswerCache(0),
    ),
    authenticator: principals.authenticator,
    rateLimits: unlimited,
  });

  describe('D2 unknown routes', () => {
    it.each([
      ['GET', '/v3'],
      ['GET', '/v3/playbook'],
      ['GET', '/v2/playbook/catalogs'],
      ['GET', '/v3/playbook/catalogs/svc'],
      ['GET', '/v3/playbook/catalogs/svc/handbook/resources/doc/versions'],
      ['GET', '/v3/playbook/resources'],
    ] as const)('D2: %s %s is a 404 problem document', async (method, url) => {
      for (const credential of [{}, headers]) {
        const res = await app.inject({ method, url, headers: credential });
        expect(checkProblem(res, 404, 'not_found'), res.body).toEqual([]);
      }
    });

    it.each([
      ['POST', '/v3/playbook/catalogs'],
      ['DELETE', '/v3/playbook/resources/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b'],
    ] as const)('D2: %s %s, a known path, is a 405 problem document with Allow', async (method, url) => {
      for (const credential of [{}, headers]) {
        const res = await app.inject({ method, url, headers: credential });
        expect(checkProblem(res, 405, 'method_not_allowed'), res.body).toEqual([]);
        expect(res.headers.allow).toBe('GET, HEAD');
      }
    });

    it('D2: a path the router cannot decode is a 400 problem document, not a bare framework answer', async () => {
      for (const url of ['/v3/playbook/resources/%E0%A4%A', '/v3/playbook/catalogs/svc/%zz/resources']) {
        const res = await app.inject({ url, headers });
        expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
        expect(res.body).not.toContain('%E0');
      }
    });
  });

  describe('D2 request ids', () => {
    const answers = () => [
      { name: '200', url: '/v3/playbook/catalogs', headers },
      { name: '400', url: '/v3/playbook/catalogs?page=0', headers },
      { name: '401', url: '/v3/playbook/catalogs', headers: {} },
      { name: '403', url: `/v3/playbook/resources/${doc.id}`, headers },
      { name: '404', url: '/v3/nothing', headers: {} },
      { name: '400 router', url: '/v3/playbook/resources/%E0%A4%A', headers },
      { name: 'healthz', url: '/healthz', headers: {} },
      { name: 'readyz', url: '/readyz', headers: {} },
      { name: 'openapi', url: '/v3/openapi.json', headers: {} },
      { name: 'docs', url: '/docs', headers: {} },
    ];

    it('D2: every answer carries an x-request-id, a fresh one when none is sent', async () => {
      const seen = new Set<string>();
      for (const { name, url, headers: h } of answers()) {
        const res = await app.inject({ url, headers: h });
        const id = String(res.headers['x-request-id']);
        expect(id, name).toMatch(UUID_V4);
        seen.add(id);
      }
      expect(seen.size).toBe(answers().length);
    });

    it('D2: a 304 carries the x-request-id as well', async () => {
      const url = '/v3/playbook/catalogs';
      const etag = String((await app.inject({ url, headers })).headers.etag);
      const res = await app.inject({
        url,
        headers: { ...headers, 'if-none-match': etag, 'x-request-id': 'rev-1' },
      });
      expect(res.statusCode).toBe(304);
      expect(res.headers['x-request-id']).toBe('rev-1');
    });

    it.each([
      ['letters and digits', 'abc123'],
      ['a uuid', '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b'],
      ['dots, colons, underscores', 'trace.01:span_02'],
      ['128 characters', 'r'.repeat(128)],
    ])('D2: a sane request id (%s) is echoed on success and in problem documents', async (_why, id) => {
      for (const { name, url, headers: h } of answers()) {
        const res = await app.inject({ url, headers: { ...h, 'x-request-id': id } });
        expect(res.headers['x-request-id'], name).toBe(id);
        if (res.statusCode >= 400) expect(JSON.parse(res.body).requestId, name).toBe(id);
      }
    });

    it.each([
      ['too long', 'r'.repeat(129)],
      ['a space', 'abc def'],
      ['a slash', 'a/b'],
      ['markup', '<script>'],
      ['a quote', 'a"b'],
      ['non-ASCII', 'réquest'],
      ['empty', ''],
    ])('D2: a request id with %s is replaced by a fresh one', async (_why, id) => {
      for (const { name, url, headers: h } of answers()) {
        const res = await app.inject({ url, headers: { ...h, 'x-request-id': id } });
        expect(res.headers['x-request-id'], name).toMatch(UUID_V4);
        if (res.statusCode >= 400)
          expect(JSON.parse(res.body).requestId, name).toBe(res.headers['x-request-id']);
      }
    });

    it('D2: a request id sent twice is replaced', async () => {
      const res = await app.inject({
        url: '/v3/playbook/catalogs',
        headers: { ...headers, 'x-request-id': ['one', 'two'] },
      });
      expect(res.headers['x-request-id']).toMatch(UUID_V4);
    });
  });

  describe('D18 health and readiness', () => {
    it('D18: /healthz answers 200 without a credential', async () => {
      const res = await app.inject({ url: '/healthz' });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ status: 'ok' });
    });

    it('D18: health and readiness are never cached nor turned into a 304', async () => {
      for (const url of ['/healthz', '/readyz']) {
        const res = await app.inject({ url, headers: { 'if-none-match': '*' } });
        expect(res.statusCode, url).toBe(200);
        expect(res.headers['cache-control'], url).toBe('no-store');
        expect(res.headers.etag, url).toBeUndefined();
      }
    });

    it('D18: /readyz answers 200 without a credential while storage answers', async () => {
      const res = await app.inject({ url: '/readyz' });
      expect(res.statusCode).toBe(200);
      expect(res.json().status).toBe('ready');
    });

    it('D18: /readyz answers 503 while a required check fails, naming it; an optional one does not count', async () => {
      const failing = async () => {
        throw new Error('connect ECONNREFUSED 10.0.0.1:5432');
      };
      const probe = await buildApp({
        ...appParts(),
        readiness: [
          { name: 'database', essential: true, check: failing },
          { name: 'cache', optional: true, check: failing },
          { name: 'contentStore', check: () => backend.objectStore.check() },
        ],
      });
      try {
        const res = await probe.inject({ url: '/readyz' });
        expect(res.statusCode).toBe(503);
        expect(res.json()).toEqual({
          status: 'unavailable',
          checks: { database: 'unavailable', cache: 'unavailable', contentStore: 'ok' },
        });
        expect(res.body).not.toContain('ECONNREFUSED');
        expect(res.body).not.toContain('10.0.0.1');
        expect(res.headers['cache-control']).toBe('no-store');
        expect(res.headers['x-request-id']).toMatch(UUID_V4);
      } finally {
        await probe.close();
      }

      const degraded = await buildApp({
        ...appParts(),
        readiness: [{ name: 'cache', optional: true, check: failing }],
      });
      try {
        expect((await degraded.inject({ url: '/readyz' })).statusCode).toBe(200);
      } finally {
        await degraded.close();
      }
    });

    it('D31: /readyz answers for this instance: starting and draining fail; a shared dependency down fails only an instance that holds nothing, or the strict form', async () => {
      let databaseUp = true;
      let storeUp = true;
      let redisUp = true;
      let holds = false;
      const instance = new InstanceState('starting');
      const probe = await buildApp({
        ...appParts(),
        readiness: [
          {
            name: 'database',
            essential: true,
            check: async () => {
              if (!databaseUp) throw new Error('connect ECONNREFUSED 10.0.0.1:5432');
            },
          },
          {
            name: 'contentStore',
            check: async () => {
              if (!storeUp) throw new Error('timed out');
            },
          },
          {
            name: 'redis',
            optional: true,
            check: async () => {
              if (!redisUp) throw new Error('connection closed');
            },
          },
        ],
        instance,
        servesFromMemory: () => holds,
      });
      const ready = async (query = '') => {
        const answer = await probe.inject({ url: `/readyz${query}` });
        return [answer.statusCode, answer.json().status, answer.json().checks?.database];
      };
      try {
        expect(await ready()).toEqual([503, 'starting', 'ok']);
        instance.state = 'serving';
        expect(await ready()).toEqual([200, 'ready', 'ok']);
        expect(await ready('?strict=true')).toEqual([200, 'ready', 'ok']);
        databaseUp = false;
        expect(await ready()).toEqual([503, 'unavailable', 'unavailable']);
        holds = true;
        expect(await ready()).toEqual([200, 'degraded', 'unavailable']);
        expect(await ready('?strict=true')).toEqual([503, 'unavailable', 'unavailable']);
        expect(await ready('?strict=false')).toEqual([200, 'degraded', 'unavailable']);
        // The object store out: lists and content kept in the database are still served.
        databaseUp = true;
        holds = false;
        storeUp = false;
        expect(await ready()).toEqual([200, 'degraded', 'ok']);
        expect(await ready('?strict=true')).toEqual([503, 'unavailable', 'ok']);
        // Redis out: ready, but not in the strict form, which fails on any dependency.
        storeUp = true;
        redisUp = false;
        expect(await ready()).toEqual([200, 'ready', 'ok']);
        expect(await ready('?strict=true')).toEqual([503, 'unavailable', 'ok']);
        redisUp = true;
        instance.state = 'draining';
        expect(await ready()).toEqual([503, 'draining', 'ok']);
        // Its query is checked like any other.
        for (const query of ['?strict=maybe', '?other=1', '?strict=true&strict=false']) {
          const refused = await probe.inject({ url: `/readyz${query}` });
          expect(refused.statusCode, query).toBe(400);
          checkProblem(refused, 400, 'invalid_request');
        }
      } finally {
        await probe.close();
      }
    });
  });

  describe('D17 self-description', () => {
    interface Operation {
      operationId?: string;
      parameters?: { in: string; name: string; required?: boolean }[];
      responses: Record<string, unknown>;
    }
    interface OpenApi {
      openapi: string;
      paths: Record<string, Record<string, Operation>>;
      components: { schemas: Record<string, { required?: string[]; properties?: Record<string, unknown> }> };
    }

    let document: OpenApi;
    beforeAll(async () => {
      const res = await app.inject({ url: '/v3/openapi.json' });
      expect(res.statusCode).toBe(200);
      document = res.json();
    });

    it('D17: /v3/openapi.json is an OpenAPI 3.1 document served without a credential', async () => {
      const res = await app.inject({ url: '/v3/openapi.json' });
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect(document.openapi).toMatch(/^3\.1\.\d+$/);
    });

    it("D17: it names the contract's operation ids on the contract's paths, and the D16 list", () => {
      const operations = Object.entries(document.paths).flatMap(([path, methods]) =>
        Object.entries(methods).map(([method, op]) => `${method.toUpperCase()} ${path} ${op.operationId}`),
      );
      expect(operations).toEqual(
        expect.arrayContaining([
          'GET /v3/playbook/catalogs listPlaybookCatalogs',
          'GET /v3/playbook/catalogs/{owner}/{catalogSlug}/resources listPlaybookCatalogResources',
          'GET /v3/playbook/resources/{resourceId} getPlaybookResource',
          'GET /v3/playbook/resources/{resourceId}/versions/{versionId} getPlaybookResourceVersion',
          'GET /v3/playbook/resources/{resourceId}/versions listPlaybookResourceVersions',
          'GET /v3/playbook/catalogs/{owner}/{catalogSlug} getPlaybookCatalog',
          'GET /v3/playbook/catalogs/{owner}/{catalogSlug}/resources/{resourceSlug} getPlaybookResourceByRef',
        ]),
      );
    });

    it("D17: the operations' parameters are those of contract.md §4", () => {
      const names = (path: string) =>
        (document.paths[path]?.get?.parameters ?? [])
          .map((p) => `${p.in}:${p.name}${p.required ? '!' : ''}`)
          .sort();
      // Every read also takes the account selector of D9.
      expect(names('/v3/playbook/catalogs')).toEqual([
        'header:x-account-id',
        'query:capability',
        'query:page',
        'query:pageSize',
        'query:sourceScope',
      ]);
      expect(names('/v3/playbook/catalogs/{owner}/{catalogSlug}/resources')).toEqual([
        'header:x-account-id',
        'path:catalogSlug!',
        'path:owner!',
        'query:kind',
        'query:page',
        'query:pageSize',
      ]);
      expect(names('/v3/playbook/resources/{resourceId}')).toEqual([
        'header:x-account-id',
        'path:resourceId!',
      ]);
      expect(names('/v3/playbook/resources/{resourceId}/versions/{versionId}')).toEqual([
        'header:x-account-id',
        'path:resourceId!',
        'path:versionId!',
      ]);
      // The reads by human ref (D29).
      expect(names('/v3/playbook/catalogs/{owner}/{catalogSlug}')).toEqual([
        'header:x-account-id',
        'path:catalogSlug!',
        'path:owner!',
      ]);
      expect(names('/v3/playbook/catalogs/{owner}/{catalogSlug}/resources/{resourceSlug}')).toEqual([
        'header:x-account-id',
        'path:catalogSlug!',
        'path:owner!',
        'path:resourceSlug!',
      ]);
    });

    it('D17: the documented shapes state the required fields of contract.md §2', () => {
      const schemas = document.components.schemas;
      const requiredOf = (name: string) => [...(schemas[name]?.required ?? [])].sort();
      expect(requiredOf('Catalog')).toEqual(
        ['createdAt', 'humanRef', 'id', 'name', 'owner', 'slug', 'sourceScope', 'status', 'updatedAt'].sort(),
      );
      const resourceRequired = [
        'catalogHumanRef',
        'catalogId',
        'createdAt',
        'humanRef',
        'id',
        'kind',
        'manifest',
        'slug',
        'sourceScope',
        'status',
        'title',
        'updatedAt',
      ];
      const detail = Object.values(schemas).find((s) => s.required?.includes('currentVersion'));
      expect(detail?.required?.slice().sort()).toEqual([...resourceRequired, 'currentVersion'].sort());
      const versionRequired = [
        'contentHash',
        'contentSizeBytes',
        'id',
        'mediaType',
        'status',
        'storageBackend',
        'version',
      ];
      const versionDetail = Object.values(schemas).find((s) => s.required?.includes('content'));
      expect(versionDetail?.required?.slice().sort()).toEqual(
        [...versionRequired, 'content', 'manifest'].sort(),
      );
    });

    it('D17: nothing in the document names storage internals', () => {
      const text = JSON.stringify(document);
      expect(text).not.toMatch(/storageKey|storage_key|objectKey|account_id|content_blobs/);
      // Account ids belong to key management; the read side never shows who owns an account's data.
      const paths = document.paths as Record<string, unknown>;
      const reads = Object.keys(paths).filter((p) => p.startsWith('/v3/playbook'));
      expect(reads.length).toBeGreaterThan(0);
      expect(JSON.stringify(reads.map((p) => paths[p]))).not.toContain('accountId');
      expect(text).not.toContain(backend.workDir);
    });

    it('D17: /docs serves an HTML page without a credential', async () => {
      const res = await app.inject({ url: '/docs' });
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toMatch(/^text\/html/);
      expect(res.body).toMatch(/<html/i);
    });

    it('D17: the docs keep a strict Content-Security-Policy that works over plain HTTP', async () => {
      for (const url of ['/docs', '/docs/static/index.html', '/docs/static/swagger-initializer.js']) {
        const res = await app.inject({ url, headers: { host: '192.0.2.10:8080' } });
        const policy = String(res.headers['content-security-policy']);
        const directives = policy.split(';').map((d) => d.trim());
        // upgrade-insecure-requests would make a browser fetch the assets over https and show nothing.
        expect(directives, url).not.toContain('upgrade-insecure-requests');
        expect(directives, url).toContain("default-src 'self'");
        expect(directives, url).toContain("object-src 'none'");
        expect(policy, url).toMatch(/script-src 'self'/);
      }
    });

    it.each(['/docs', '/docs/'])(
      'D17: every script and stylesheet %s references is served by the service itself',
      async (page) => {
        const html = (await app.inject({ url: page })).body;
        const references = [...html.matchAll(/\b(?:src|href)\s*=\s*["']([^"']+)["']/gi)].map((m) => m[1]!);
        expect(references.filter((r) => /\.js(\?|$)/.test(r)).length).toBeGreaterThan(0);
        expect(references.filter((r) => /\.css(\?|$)/.test(r)).length).toBeGreaterThan(0);
        for (const reference of references) {
          // Absolute or protocol-relative URLs would need the internet (or another host).
          expect(reference, reference).not.toMatch(/^(?:[a-z][a-z0-9+.-]*:|\/\/)/i);
          const resolved = new URL(reference, `http://service.internal${page}`);
          expect(resolved.host).toBe('service.internal');
          const asset = await app.inject({ url: resolved.pathname });
          expect(asset.statusCode, resolved.pathname).toBe(200);
          expect(asset.body.length, resolved.pathname).toBeGreaterThan(0);
        }
      },
    );

    it('D17: the docs page loads its OpenAPI document from the service, without a credential', async () => {
      const initializer = await app.inject({ url: '/docs/static/swagger-initializer.js' });
      expect(initializer.statusCode).toBe(200);
      expect(initializer.body).not.toMatch(/\burl:\s*["'`]https?:/);
      const spec = await app.inject({ url: '/docs/json' });
      expect(spec.statusCode).toBe(200);
      expect(spec.json().openapi).toBe(document.openapi);
    });
  });

  describe('D18 logs', () => {
    it('D18: request logs are JSON lines carrying the request id and never the credential', async () => {
      const lines: string[] = [];
      const stream = new Writable({
        write(chunk: Buffer, _encoding, done) {
          lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
          done();
        },
      });
      const logged = await buildApp({
        ...appParts(),
        readiness: [],
        logger: { level: 'debug', stream },
      });
      try {
        const secretHeaders = await principals.register({ accountId: null, scopes: ['playbook:read'] });
        const secret = secretHeaders['x-api-key']!;
        await logged.inject({
          url: '/v3/playbook/catalogs',
          headers: { ...secretHeaders, 'x-request-id': 'log-1' },
        });
        await logged.inject({
          url: `/v3/playbook/resources/${doc.id}`,
          headers: { ...secretHeaders, authorization: `Bearer ${secret}`, 'x-request-id': 'log-2' },
        });
        expect(lines.length).toBeGreaterThan(0);
        const records = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
        expect(records.some((r) => r.reqId === 'log-1')).toBe(true);
        expect(records.some((r) => r.reqId === 'log-2')).toBe(true);
        for (const line of lines) expect(line).not.toContain(secret);
      } finally {
        await logged.close();
      }
    });
  });
});
