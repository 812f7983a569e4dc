import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenCatalog, givenResource } from '../helpers/fixtures.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const KEYS = '/v3/identity/api-keys';
const CATALOG = '/v3/playbook/catalogs/{owner}/{catalogSlug}';
const MISSING = '01900000-0000-7000-8000-000000000000';
const PUBLISHED = { name: 'Docs', version: '1', resources: [] };
/** Headers of HTTP itself, which describe the message rather than the answer: not the document's to declare. */
const HTTP_ITSELF = new Set([
  'content-type',
  'content-length',
  'date',
  'connection',
  'keep-alive',
  'transfer-encoding',
]);
const run = promisify(execFile);

interface Header {
  $ref: string;
}
interface Response {
  description: string;
  headers?: Record<string, Header>;
  content?: Record<string, { schema: Record<string, unknown> }>;
}
interface Operation {
  operationId: string;
  security?: unknown[];
  parameters?: { in: string; name: string }[];
  requestBody?: { content: Record<string, { schema: Record<string, unknown> }> };
  responses: Record<string, Response>;
}
type Document = {
  servers: { url: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { headers: Record<string, { required?: boolean }>; schemas: Record<string, unknown> };
};

/** Runs a linter from node_modules/.bin; its exit status and what it printed. */
async function lint(command: string, args: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run(path.join(ROOT, 'node_modules/.bin', command), args, {
      cwd: ROOT,
      env: {
        ...process.env,
        REDOCLY_TELEMETRY: 'off',
        REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true',
        NO_COLOR: '1',
      },
    });
    return { code: 0, output: stdout + stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return { code: failed.code ?? 1, output: `${failed.stdout ?? ''}${failed.stderr ?? ''}` };
  }
}

const redocly = (file: string) =>
  lint('redocly', ['lint', file, '--config', 'redocly.yaml', '--format', 'stylish']);
const spectral = (file: string) =>
  lint('spectral', [
    'lint',
    file,
    '--ruleset',
    '.spectral.yaml',
    '--fail-severity',
    'warn',
    '--format',
    'text',
  ]);

describe('the OpenAPI document (D17), lint-clean and true to the answers', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let document: Document;
  let dir: string;
  let file: string;
  let reader: Record<string, string>;
  let resourceId: string;
  let versionId: string;

  beforeAll(async () => {
    backend = await createTestBackend();
    // The whole service: reads, key management, audit, publishing and leak reports.
    identity = createTestIdentity(backend, {
      env: { PLAYBOOK_LEAK_REPORT_KEYS_URL: 'https://keys.example.com/leaks' },
    });
    app = await buildIdentityApp(backend, identity);
    reader = (await identity.mintKey({ accountId: 'acme' })).headers;
    const catalog = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    const resource = await givenResource(backend, catalog, { slug: 'intro' });
    resourceId = resource.id;
    versionId = resource.currentVersionId;
    const answer = await app.inject({ url: '/v3/openapi.json' });
    document = answer.json();
    // Inside the project (in its build output, which git ignores): the ruleset's overrides name the
    // document by a path relative to the ruleset, as a project's own documents are.
    await fs.mkdir(path.join(ROOT, 'dist'), { recursive: true });
    dir = await fs.mkdtemp(path.join(ROOT, 'dist', 'openapi-lint-'));
    file = path.join(dir, 'openapi.json');
    await fs.writeFile(file, answer.body);
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
    await fs.rm(dir, { recursive: true, force: true });
  });

  it("passes Redocly's recommended rules without an error or a warning", async () => {
    const result = await redocly(file);
    expect(result.output).toMatch(/Your API description is valid/);
    expect(result.output).not.toMatch(/^\s+\d+:\d+\s+(error|warning)\s/m);
    expect(result, result.output).toMatchObject({ code: 0 });
  }, 60_000);

  it('passes spectral:oas and the OWASP ruleset without an error or a warning', async () => {
    const result = await spectral(file);
    expect(result, result.output).toMatchObject({ code: 0 });
    expect(result.output).toMatch(/No results/);
  }, 60_000);

  it('fails the gate on a document with an unbounded string or an undeclared rate-limit header', async () => {
    const broken = structuredClone(document) as Document & {
      components: { schemas: Record<string, { properties: Record<string, { maxLength?: number }> }> };
    };
    delete broken.components.schemas.Catalog!.properties.slug!.maxLength;
    const catalogs = broken.paths['/v3/playbook/catalogs']!.get!;
    delete catalogs.responses['200']!.headers!['RateLimit-Limit'];
    const brokenFile = path.join(dir, 'broken.json');
    await fs.writeFile(brokenFile, JSON.stringify(broken));
    const result = await spectral(brokenFile);
    expect(result.code).not.toBe(0);
    expect(result.output).toContain('owasp:api4:2023-string-limit');
    expect(result.output).toContain('owasp:api4:2023-rate-limit');
    // Redocly: an operation id used twice, and no license.
    const twice = structuredClone(document) as Document & { info: { license?: unknown } };
    twice.paths['/v3/playbook/catalogs']!.get!.operationId = 'getPlaybookResource';
    delete twice.info.license;
    const twiceFile = path.join(dir, 'twice.json');
    await fs.writeFile(twiceFile, JSON.stringify(twice));
    const again = await redocly(twiceFile);
    expect(again.code).not.toBe(0);
    expect(again.output).toMatch(/error\s+operation-operationId-unique/);
    expect(again.output).toMatch(/warning\s+info-license/);
  }, 60_000);

  const operations = () =>
    Object.entries(document.paths).flatMap(([route, item]) =>
      Object.entries(item).map(([method, operation]) => ({ route, method, operation })),
    );

  it('declares every error as an application/problem+json Problem, with x-request-id', () => {
    for (const { route, method, operation } of operations()) {
      for (const [status, response] of Object.entries(operation.responses)) {
        const where = `${method} ${route} ${status}`;
        expect(response.headers?.['x-request-id'], where).toEqual({ $ref: '#/components/headers/RequestId' });
        // A HEAD answer has no body (RFC 9110 §9.3.2).
        if (Number(status) < 400 || method === 'head') continue;
        expect(Object.keys(response.content ?? {}), where).toEqual(['application/problem+json']);
      }
    }
  });

  it('declares 304 and the validators on every read, rate limits on every authenticated answer but a 405, Retry-After on 429', () => {
    for (const { route, method, operation } of operations()) {
      const secured = (operation.security?.length ?? 0) > 0;
      if (method === 'get') {
        for (const status of ['200', '304']) {
          const headers = Object.keys(operation.responses[status]?.headers ?? {});
          expect(headers, `${route} ${status}`).toEqual(
            expect.arrayContaining(['ETag', 'Cache-Control', 'Vary']),
          );
        }
        expect(operation.responses['304']?.content, route).toBeUndefined();
      }
      for (const [status, response] of Object.entries(operation.responses)) {
        const headers = Object.keys(response.headers ?? {});
        // A 405 is answered before any credential is looked at: it counts against nothing.
        if (secured && status !== '405') {
          expect(headers, `${method} ${route} ${status}`).toEqual(
            expect.arrayContaining(['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']),
          );
        }
        if (status === '429') expect(headers).toContain('Retry-After');
      }
    }
  });

  it('D29: documents HEAD beside each GET, with the same statuses and headers and no body', () => {
    const gets = operations().filter(({ method }) => method === 'get');
    expect(gets.length).toBeGreaterThan(5);
    for (const { route, operation } of gets) {
      const head = document.paths[route]!.head;
      expect(head, route).toBeDefined();
      expect(head!.operationId).toBe(
        `head${operation.operationId[0]!.toUpperCase()}${operation.operationId.slice(1)}`,
      );
      expect(Object.keys(head!.responses)).toEqual(Object.keys(operation.responses));
      for (const [status, response] of Object.entries(head!.responses)) {
        expect(response.content, `HEAD ${route} ${status}`).toBeUndefined();
        expect(response.headers).toEqual(operation.responses[status]!.headers);
      }
    }
  });

  it("D29: HTTP's own statuses: 405 and 406 on every operation, 413 and 415 on every one that may take a body", () => {
    for (const { route, method, operation } of operations()) {
      const statuses = Object.keys(operation.responses);
      expect(statuses, `${method} ${route}`).toEqual(expect.arrayContaining(['405', '406']));
      if (['put', 'post', 'delete'].includes(method)) {
        expect(statuses, `${method} ${route}`).toEqual(expect.arrayContaining(['413', '415']));
      }
      const header = (status: string, name: string) => operation.responses[status]?.headers?.[name];
      expect(header('405', 'Allow'), route).toEqual({ $ref: '#/components/headers/Allow' });
      // Every operation that takes a credential may answer 401 with its challenge; the development
      // sign-in (D33) takes none.
      if ((operation.security?.length ?? 0) > 0) {
        expect(header('401', 'WWW-Authenticate'), route).toEqual({
          $ref: '#/components/headers/WwwAuthenticate',
        });
      }
      expect(header('503', 'Retry-After'), route).toEqual({ $ref: '#/components/headers/RetryAfter' });
    }
    for (const name of ['Allow', 'WwwAuthenticate', 'RetryAfter', 'RequestId', 'ETag', 'Vary']) {
      expect(document.components.headers[name]?.required, name).toBe(true);
    }
  });

  it('D29: every body of an answer is a named component', () => {
    const inline: string[] = [];
    for (const { route, method, operation } of operations()) {
      const bodies = Object.entries(operation.responses).flatMap(([status, response]) =>
        Object.values(response.content ?? {}).map((media) => [status, media] as const),
      );
      for (const [which, media] of bodies) {
        const ref = media.schema.$ref;
        if (typeof ref !== 'string' || !ref.startsWith('#/components/schemas/')) {
          inline.push(`${method} ${route} ${which}`);
        } else {
          expect(document.components.schemas[ref.slice('#/components/schemas/'.length)], ref).toBeDefined();
        }
      }
    }
    expect(inline).toEqual([]);
    expect(Object.keys(document.components.schemas)).toEqual(
      expect.arrayContaining(['CatalogPage', 'PublishReport', 'CreatedApiKey', 'ApiKeyPage', 'LeakVerdicts']),
    );
  });

  /**
   * The free text of the document: strings with no form to state. Every other string has a pattern, a
   * format, an enum or a const (what .spectral.yaml says when it turns owasp:api4:2023-string-restricted off).
   */
  const FREE_TEXT = [
    /^components\/schemas\/Problem\/properties\/detail$/,
    /^components\/schemas\/Problem\/properties\/errors\/items\/properties\/(name|message)$/,
    /\/properties\/content$/,
    /^components\/schemas\/PublishReport\/properties\/lines\/items$/,
    /^components\/schemas\/AuditEvent\/properties\/(summary|actor\/properties\/id)$/,
    /^components\/schemas\/WebhookEvent\/properties\/data\/properties\/(summary|actor\/properties\/id)$/,
    /^components\/schemas\/WebhookDeliveryAttempt\/properties\/error$/,
    /^paths\/\/v3\/playbook\/catalogs\/(get|head)\/parameters\/\d+\/schema$/,
    /^paths\/\/v3\/identity\/api-keys\/leaks\/post\/requestBody\/.*\/items\/properties\/(token|type|url|source)$/,
    /^components\/schemas\/LeakVerdict\/properties\/token_type$/,
    // The audit list's actor filter is an actor's id as events show it (free text, as above); a
    // user's id is a token's subject; an account's name is a label.
    /^paths\/\/v3\/identity\/audit-events\/(get|head)\/parameters\/\d+\/schema$/,
    /^components\/schemas\/Me\/properties\/user\/properties\/id$/,
    /^components\/schemas\/UserAccount\/properties\/name$/,
  ];

  it('D29: every structured string has a pattern, a format, an enum or a const; only free text has none', () => {
    const unformed: string[] = [];
    const walk = (node: unknown, at: string): void => {
      if (Array.isArray(node)) {
        for (const [index, child] of node.entries()) walk(child, `${at}/${index}`);
      }
      if (node === null || typeof node !== 'object' || Array.isArray(node)) return;
      const schema = node as Record<string, unknown>;
      if (schema.type === 'string' && !['pattern', 'format', 'enum', 'const'].some((key) => key in schema)) {
        unformed.push(at);
      }
      for (const [key, child] of Object.entries(schema)) walk(child, at === '' ? key : `${at}/${key}`);
    };
    walk({ paths: document.paths, components: document.components }, '');
    expect(unformed.filter((at) => !FREE_TEXT.some((free) => free.test(at)))).toEqual([]);
    // The capability filter and the audit list's actor are the query parameters of free text.
    expect(unformed.filter((at) => at.includes('/parameters/'))).toHaveLength(4);
  });

  it('D29: the server is relative, whatever Host the request names, in the document and under /docs', async () => {
    for (const url of ['/v3/openapi.json', '/docs/json']) {
      const answer = await app.inject({ url, headers: { host: 'evil.example:666' } });
      expect(answer.statusCode, url).toBe(200);
      expect(answer.json().servers, url).toEqual([expect.objectContaining({ url: '/' })]);
      expect(answer.body).not.toContain('evil.example');
    }
  });

  it('declares x-account-id on every operation of the playbook, reads and writes', () => {
    const reads = operations().filter(({ route }) => route.startsWith('/v3/playbook/'));
    // Eight reads with their HEADs (the sync feed's among them), and five writes.
    expect(reads.length).toBe(21);
    for (const { route, operation } of reads) {
      expect(
        operation.parameters?.map((p) => `${p.in}:${p.name}`),
        route,
      ).toContain('header:x-account-id');
    }
  });

  it('is what the service answers: each read sends the headers its 200, 304 and 401 declare', async () => {
    const urls: Record<string, string> = {
      '/v3/playbook/catalogs': '/v3/playbook/catalogs',
      '/v3/playbook/catalogs/{owner}/{catalogSlug}/resources': '/v3/playbook/catalogs/svc/handbook/resources',
      '/v3/playbook/catalogs/{owner}/{catalogSlug}': '/v3/playbook/catalogs/svc/handbook',
      '/v3/playbook/catalogs/{owner}/{catalogSlug}/resources/{resourceSlug}':
        '/v3/playbook/catalogs/svc/handbook/resources/intro',
      '/v3/playbook/resources/{resourceId}': `/v3/playbook/resources/${resourceId}`,
      '/v3/playbook/resources/{resourceId}/versions': `/v3/playbook/resources/${resourceId}/versions`,
      '/v3/playbook/resources/{resourceId}/versions/{versionId}': `/v3/playbook/resources/${resourceId}/versions/${versionId}`,
      '/v3/playbook/sync': '/v3/playbook/sync',
    };
    const headerName = (declared: string) => declared.toLowerCase();
    for (const [route, url] of Object.entries(urls)) {
      const operation = document.paths[route]!.get!;
      const ok = await app.inject({ url, headers: { ...reader, 'accept-encoding': 'identity' } });
      expect(ok.statusCode, url).toBe(200);
      expect(ok.headers['content-type'], url).toMatch(/^application\/json/);
      // Content-Encoding is declared for compressed answers; this one asked for none.
      for (const declared of Object.keys(operation.responses['200']!.headers!).filter(
        (h) => h !== 'Content-Encoding',
      )) {
        expect(ok.headers[headerName(declared)], `${url} 200 ${declared}`).toBeDefined();
      }
      const unchanged = await app.inject({
        url,
        headers: { ...reader, 'if-none-match': String(ok.headers.etag) },
      });
      expect(unchanged.statusCode, url).toBe(304);
      for (const declared of Object.keys(operation.responses['304']!.headers!)) {
        expect(unchanged.headers[headerName(declared)], `${url} 304 ${declared}`).toBeDefined();
      }
      const refused = await app.inject({ url });
      expect(refused.statusCode, url).toBe(401);
      expect(refused.headers['content-type'], url).toMatch(/^application\/problem\+json/);
      for (const declared of Object.keys(operation.responses['401']!.headers!)) {
        expect(refused.headers[headerName(declared)], `${url} 401 ${declared}`).toBeDefined();
      }
    }
  });

  it('D29: is what the service answers: every header a status declares required is sent with it', async () => {
    const token = await identity.tokenHeaders({ accounts: ['acme'] });
    const writer = (
      await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] })
    ).headers;
    const json = { 'content-type': 'application/json' };
    const key = { name: 'docs', accountId: 'acme', scopes: ['playbook:read'] };
    const createKey = () =>
      app.inject({ method: 'POST', url: KEYS, headers: { ...token, ...json }, payload: key });
    const created = await createKey();
    const rolled = await createKey();
    await app.inject({
      method: 'POST',
      url: `${KEYS}/${rolled.json().id}/roll`,
      headers: token,
      payload: {},
    });
    const cases: [string, string, number, InjectOptions][] = [
      [
        'head',
        '/v3/playbook/resources/{resourceId}',
        200,
        { method: 'HEAD', url: `/v3/playbook/resources/${resourceId}`, headers: reader },
      ],
      [
        'get',
        '/v3/playbook/catalogs',
        406,
        { url: '/v3/playbook/catalogs', headers: { ...reader, accept: 'text/html' } },
      ],
      [
        'get',
        '/v3/playbook/catalogs',
        405,
        { method: 'DELETE', url: '/v3/playbook/catalogs', headers: reader },
      ],
      [
        'get',
        '/v3/playbook/resources/{resourceId}',
        404,
        { url: `/v3/playbook/resources/${MISSING}`, headers: reader },
      ],
      ['post', KEYS, 201, { method: 'POST', url: KEYS, headers: { ...token, ...json }, payload: key }],
      [
        'post',
        KEYS,
        415,
        { method: 'POST', url: KEYS, headers: { ...token, 'content-type': 'text/plain' }, payload: 'x' },
      ],
      [
        'post',
        KEYS,
        413,
        {
          method: 'POST',
          url: KEYS,
          headers: { ...token, ...json },
          payload: { ...key, pad: 'p'.repeat(70_000) },
        },
      ],
      [
        'post',
        KEYS,
        400,
        { method: 'POST', url: KEYS, headers: { ...token, ...json }, payload: { ...key, name: '' } },
      ],
      [
        'delete',
        `${KEYS}/{keyId}`,
        204,
        { method: 'DELETE', url: `${KEYS}/${created.json().id}`, headers: token },
      ],
      [
        'put',
        CATALOG,
        201,
        { method: 'PUT', url: '/v3/playbook/catalogs/org/docs', headers: writer, payload: PUBLISHED },
      ],
      [
        'put',
        CATALOG,
        412,
        {
          method: 'PUT',
          url: '/v3/playbook/catalogs/org/docs',
          headers: { ...writer, 'if-match': '"stale"' },
          payload: PUBLISHED,
        },
      ],
      [
        'put',
        CATALOG,
        403,
        { method: 'PUT', url: '/v3/playbook/catalogs/svc/docs', headers: writer, payload: PUBLISHED },
      ],
      [
        'post',
        `${CATALOG}/versions`,
        200,
        {
          method: 'POST',
          url: '/v3/playbook/catalogs/org/docs/versions',
          headers: writer,
          payload: { version: '1' },
        },
      ],
      [
        'post',
        `${KEYS}/{keyId}/roll`,
        409,
        { method: 'POST', url: `${KEYS}/${rolled.json().id}/roll`, headers: token, payload: {} },
      ],
    ];
    for (const [method, route, status, request] of cases) {
      const answer = await app.inject(request);
      const where = `${method} ${route} ${status}`;
      expect(answer.statusCode, `${where}: ${answer.body}`).toBe(status);
      const declared = document.paths[route]![method]!.responses[String(status)]!.headers!;
      const required = Object.entries(declared)
        .filter(([, header]) => document.components.headers[header.$ref.split('/').pop()!]?.required === true)
        .map(([name]) => name.toLowerCase());
      expect(required.length, where).toBeGreaterThan(0);
      for (const name of required) expect(answer.headers[name], `${where} ${name}`).toBeDefined();
      // And nothing it sends is left undeclared, but the headers of HTTP itself.
      const sent = Object.keys(answer.headers).filter((name) => !HTTP_ITSELF.has(name));
      const named = Object.keys(declared).map((name) => name.toLowerCase());
      expect(
        sent.filter((name) => !named.includes(name)),
        where,
      ).toEqual([]);
    }
  });
});
