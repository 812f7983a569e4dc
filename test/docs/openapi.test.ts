import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenCatalog, givenResource } from '../helpers/fixtures.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const run = promisify(execFile);

interface Header {
  $ref: string;
}
interface Response {
  description: string;
  headers?: Record<string, Header>;
  content?: Record<string, unknown>;
}
interface Operation {
  operationId: string;
  security?: unknown[];
  parameters?: { in: string; name: string }[];
  responses: Record<string, Response>;
}
type Document = {
  paths: Record<string, Record<string, Operation>>;
  components: { headers: Record<string, unknown> };
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
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    reader = (await identity.mintKey({ accountId: 'acme' })).headers;
    const catalog = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    const resource = await givenResource(backend, catalog, { slug: 'intro' });
    resourceId = resource.id;
    versionId = resource.currentVersionId;
    const answer = await app.inject({ url: '/v3/openapi.json' });
    document = answer.json();
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-openapi-'));
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
        if (Number(status) < 400) continue;
        expect(Object.keys(response.content ?? {}), where).toEqual(['application/problem+json']);
      }
    }
  });

  it('declares 304 and the validators on every read, rate limits on every authenticated answer, Retry-After on 429', () => {
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
        if (secured) {
          expect(headers, `${method} ${route} ${status}`).toEqual(
            expect.arrayContaining(['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']),
          );
        }
        if (status === '429') expect(headers).toContain('Retry-After');
      }
    }
    // HEAD is described with its GET rather than as an operation of its own.
    expect(operations().filter(({ method }) => method === 'head')).toEqual([]);
  });

  it('declares x-account-id on every operation of the playbook, reads and writes', () => {
    const reads = operations().filter(({ route }) => route.startsWith('/v3/playbook/'));
    expect(reads.length).toBe(13);
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
});
