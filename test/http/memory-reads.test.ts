import http from 'node:http';
import { Writable } from 'node:stream';
import fc from 'fast-check';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it, type MockInstance, vi } from 'vitest';
import { MemoryReads, nameOf } from '../../src/routes/memory-reads.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { type GivenResource, givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';

/**
 * The fast path (routes/memory-reads.ts): reads answered from memory before the framework's hooks run
 * must answer exactly what the routes answer, count what they count and write the same access line.
 * Every request here is sent twice: over a socket, where the fast path may take it, and through
 * `inject`, which always goes through the routes' hooks; the two answers must be the same.
 */

/** Headers that differ between two sendings of one request whichever path answers. */
const VOLATILE = new Set([
  'x-request-id',
  'date',
  'connection',
  'keep-alive',
  'ratelimit-remaining',
  'ratelimit-reset',
  'transfer-encoding',
]);

interface Answered {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/** A problem document names its request's id, which differs between two sendings. */
const withoutRequestId = (body: string) => body.replace(/"requestId":"[^"]*"/, '"requestId":""');

function stable(headers: Record<string, unknown>): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (!VOLATILE.has(name.toLowerCase())) kept[name.toLowerCase()] = String(value);
  }
  return kept;
}

/** The lines written to a pino logger, parsed. */
function capturedLog(): { logger: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString().split('\n')) if (text) lines.push(JSON.parse(text));
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines };
}

describe('reads answered from memory before the hooks (the fast path)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let base: string;
  let log: ReturnType<typeof capturedLog>;
  let reader: Record<string, string>;
  let writerOnly: Record<string, string>;
  let doc: GivenResource;
  let flow: GivenResource;
  let own: GivenResource;
  const handled = vi.spyOn(MemoryReads.prototype, 'handle');

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    // As a listener for the metrics would: bound series count only from then on (D25).
    identity.metrics.recording.on = true;
    log = capturedLog();
    app = await buildIdentityApp(backend, identity, log.logger);
    base = await listenLocally(app);
    const db = backend.databases.primary;
    await givenAccount(db, 'acme');
    const handbook = await givenCatalog(db, { slug: 'handbook', description: 'How we work. '.repeat(90) });
    doc = await givenResource(backend, handbook, {
      slug: 'doc',
      kind: 'document',
      versions: [
        { version: '1', content: `first ${'words '.repeat(300)}` },
        { version: '2', content: `second ${'lines\n'.repeat(300)}` },
      ],
    });
    flow = await givenResource(backend, handbook, { slug: 'flow', kind: 'workflow' });
    const runbooks = await givenCatalog(db, { slug: 'runbooks', accountId: 'acme' });
    own = await givenResource(backend, runbooks, { slug: 'own', kind: 'document' });
    reader = (await identity.mintKey({ accountId: 'acme' })).headers;
    writerOnly = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:write'] })).headers;
  });
  afterAll(async () => {
    handled.mockRestore();
    await app.close();
    await backend.cleanup();
  });

  /** Sent as given, with no header of a client library's own (fetch would add Accept-Encoding). */
  function overSocket(method: string, url: string, headers: Record<string, string>): Promise<Answered> {
    return new Promise((resolve, reject) => {
      const request = http.request(`${base}${url}`, { method, headers }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({
            status: response.statusCode ?? 0,
            headers: stable(response.headers),
            body: withoutRequestId(Buffer.concat(chunks).toString('latin1')),
          }),
        );
        response.on('error', reject);
      });
      request.on('error', reject);
      request.end();
    });
  }

  async function throughHooks(
    method: string,
    url: string,
    headers: Record<string, string>,
  ): Promise<Answered> {
    const response: LightMyRequestResponse = await app.inject({
      method: method as 'GET',
      url,
      headers,
    });
    return {
      status: response.statusCode,
      headers: stable(response.headers),
      body: withoutRequestId(response.rawPayload.toString('latin1')),
    };
  }

  /** Whether the last request over a socket was answered by the fast path. */
  const lastTakenFast = () => handled.mock.results.at(-1)?.value === true;

  const paths = () => [
    `/v3/playbook/resources/${doc.id}`,
    `/v3/playbook/resources/${doc.id.toUpperCase()}`,
    `/v3/playbook/resources/${flow.id}`,
    `/v3/playbook/resources/${own.id}`,
    `/v3/playbook/resources/${doc.id}/versions`,
    `/v3/playbook/resources/${doc.id}/versions/${doc.versionIds[0]}`,
    `/v3/playbook/resources/${doc.id}/versions/${doc.versionIds[1]}`,
    '/v3/playbook/catalogs',
    '/v3/playbook/catalogs/svc/handbook',
    '/v3/playbook/catalogs/org/runbooks',
    '/v3/playbook/catalogs/svc/handbook/resources',
    '/v3/playbook/catalogs/org/runbooks/resources',
    '/v3/playbook/catalogs/svc/handbook/resources/doc',
    '/v3/playbook/catalogs/org/runbooks/resources/own',
    // What the routes refuse, or find nothing at, whatever memory holds.
    '/v3/playbook/catalogs/acme/runbooks/resources',
    '/v3/playbook/catalogs/xyz/handbook',
    '/v3/playbook/catalogs/svc/Handbook/resources',
    `/v3/playbook/resources/${doc.id}/`,
    `/v3/playbook/resources/%${doc.id.slice(1)}`,
    '/v3/playbook/resources/not-an-id',
    '/v3/playbook/catalogs/svc/handbook/resources/doc/extra',
  ];
  const queries = [
    '',
    '?',
    '?page=1',
    '?pageSize=2',
    '?pageSize=2&page=2',
    '?page=01',
    '?page=1e2',
    '?page=0',
    '?pageSize=101',
    '?page=1&page=2',
    '?kind=document',
    '?kind=workflow,document',
    '?kind=document&kind=workflow',
    '?kind=bogus',
    '?kind=document,',
    '?sourceScope=svc',
    '?sourceScope=svc,account',
    '?capability=x',
    '?capability=',
    '?api_key=svc_sk_test_x',
    '?unknown=1',
    '?page=%31',
    '?page=1&',
  ];
  const headerSets: Record<string, string>[] = [
    {},
    { 'accept-encoding': 'br, gzip' },
    { 'accept-encoding': 'gzip' },
    { 'accept-encoding': 'identity' },
    { accept: 'application/json' },
    { accept: 'text/html' },
    { accept: 'application/*;q=0.5, text/html' },
    { 'x-request-id': 'caller-chosen-id' },
    { 'x-account-id': 'acme' },
    { 'x-account-id': 'globex' },
  ];

  it('names only what the routes read exactly as they do', () => {
    expect(nameOf(`/v3/playbook/resources/${doc.id.toUpperCase()}`)).toEqual({
      operation: 'getPlaybookResource',
      resourceId: doc.id,
    });
    expect(nameOf('/v3/playbook/catalogs/svc/handbook/resources?kind=document,workflow&pageSize=5')).toEqual({
      operation: 'listPlaybookCatalogResources',
      params: { owner: 'svc', catalogSlug: 'handbook' },
      query: { pageSize: 5, kind: ['document', 'workflow'] },
    });
    for (const url of [
      '/v3/playbook/catalogs/acme/runbooks',
      '/v3/playbook/catalogs?page=1e2',
      '/v3/playbook/catalogs?page=1&page=1',
      '/v3/playbook/catalogs?key=%20',
      `/v3/playbook/resources/${doc.id}?x=1`,
      '/v3/playbook/sync',
      '/v3/identity/api-keys',
    ]) {
      expect(nameOf(url), url).toBeUndefined();
    }
  });

  it('answers what the routes answer, for any read, query and headers, held or not', async () => {
    // Every path read once, so that memory holds what it can.
    for (const path of paths()) await overSocket('GET', path, reader);
    let fast = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('GET', 'HEAD'),
        fc.constantFrom(...paths()),
        // Weighted towards what the fast path takes, so that it answers a fair share of the runs.
        fc.oneof(
          { arbitrary: fc.constantFrom('', '?page=1', '?pageSize=2&page=2'), weight: 3 },
          fc.constantFrom(...queries),
        ),
        fc.oneof(
          { arbitrary: fc.constantFrom(...headerSets.slice(0, 5)), weight: 3 },
          fc.constantFrom(...headerSets),
        ),
        fc.oneof({ arbitrary: fc.constant('reader'), weight: 5 }, fc.constant('writerOnly')),
        fc.boolean(),
        async (method, path, query, extra, who, revalidate) => {
          const credential = who === 'reader' ? reader : writerOnly;
          const url = `${path}${query}`;
          const first = await throughHooks(method, url, { ...credential, ...extra });
          const etag = first.headers.etag;
          const headers: Record<string, string> = {
            ...credential,
            ...extra,
            ...(revalidate && etag !== undefined ? { 'if-none-match': etag } : {}),
          };
          const hooks = await throughHooks(method, url, headers);
          const socket = await overSocket(method, url, headers);
          if (lastTakenFast()) fast++;
          expect(socket, `${method} ${url} ${JSON.stringify(extra)} ${who}`).toEqual(hooks);
        },
      ),
      { numRuns: 250, seed: 20261128 },
    );
    // The property means little unless the fast path answered a fair share of what it was sent.
    expect(fast).toBeGreaterThan(25);
  });

  it('writes the access line and counts the request as the hooks do', async () => {
    const url = `/v3/playbook/resources/${doc.id}`;
    await overSocket('GET', url, reader);
    log.lines.length = 0;
    await overSocket('GET', url, { ...reader, 'x-request-id': 'fast-one' });
    expect(lastTakenFast()).toBe(true);
    await overSocket('GET', url, { ...reader, 'x-request-id': 'hooks-one', 'x-account-id': 'acme' });
    expect(lastTakenFast()).toBe(false);
    const [fastLine, hooksLine] = log.lines.filter((line) => line.msg === 'request');
    expect(fastLine).toMatchObject({ reqId: 'fast-one', op: 'getPlaybookResource', status: 200, url });
    expect(hooksLine).toMatchObject({ reqId: 'hooks-one', op: 'getPlaybookResource', status: 200, url });
    const shape = (line: Record<string, unknown>) =>
      Object.keys(line).filter((name) => !['time', 'reqId', 'ms'].includes(name));
    expect(shape(fastLine!)).toEqual(shape(hooksLine!));
    expect({ ...fastLine, time: 0, reqId: '', ms: 0 }).toEqual({ ...hooksLine, time: 0, reqId: '', ms: 0 });
    const metrics = await identity.metrics.registry.metrics();
    expect(metrics).toMatch(/operation="getPlaybookResource",method="GET",status="200"\} [1-9]/);
  });
});

describe('the fast path and the limits (D10)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let base: string;

  /** Spied on once the first describe has let its spy go (both spy on the one prototype). */
  let handled: MockInstance<MemoryReads['handle']> | undefined;

  beforeAll(async () => {
    handled = vi.spyOn(MemoryReads.prototype, 'handle');
    backend = await createTestBackend();
    identity = createTestIdentity(backend, { env: { PLAYBOOK_RATE_LIMIT_MAX: '3' } });
    app = await buildIdentityApp(backend, identity);
    base = await listenLocally(app);
    const handbook = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    await givenResource(backend, handbook, { slug: 'doc' });
  });
  afterAll(async () => {
    handled?.mockRestore();
    await app.close();
    await backend.cleanup();
  });

  it('counts each request once, and refuses the one past the limit with its problem document', async () => {
    const { headers } = await identity.mintKey({ accountId: 'acme' });
    const url = `${base}/v3/playbook/catalogs/svc/handbook/resources/doc`;
    const remaining: string[] = [];
    for (let i = 0; i < 3; i++) {
      const response = await fetch(url, { headers });
      expect(response.status).toBe(200);
      remaining.push(response.headers.get('ratelimit-remaining') ?? '');
    }
    expect(remaining).toEqual(['2', '1', '0']);
    const refused = await fetch(url, { headers });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('ratelimit-remaining')).toBe('0');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await refused.json()).toMatchObject({ code: 'rate_limited', status: 429 });
  });

  /** Whether the last request over a socket was answered by the fast path. */
  const lastTakenFast = () => handled?.mock.results.at(-1)?.value === true;
  const detail = () => `${base}/v3/playbook/catalogs/svc/handbook/resources/doc`;

  it("counts a key's own rate beside the deployment's, and shows the tighter (D32)", async () => {
    // Held in memory by another key's read.
    await fetch(detail(), { headers: (await identity.mintKey({ accountId: 'acme' })).headers });
    const own = await identity.mintKey({
      accountId: 'acme',
      restrictions: { rateLimit: { limit: 1, windowSeconds: 60 } },
    });
    const first = await fetch(detail(), { headers: own.headers });
    // The first verifies the key the usual way, and shows its own limit, the tighter (1 of 1 against 1 of 3).
    expect([first.status, first.headers.get('ratelimit-limit'), lastTakenFast()]).toEqual([200, '1', false]);
    expect(first.headers.get('ratelimit-remaining')).toBe('0');
    // The second is counted from memory, past the key's own limit, and refused the usual way.
    const second = await fetch(detail(), { headers: own.headers });
    expect([second.status, second.headers.get('ratelimit-limit'), lastTakenFast()]).toEqual([429, '1', true]);
    expect(await second.json()).toMatchObject({
      code: 'rate_limited',
      detail: expect.stringContaining("this key's own limit"),
    });
    // Another key of the account is not held back by it.
    const other = await identity.mintKey({ accountId: 'acme' });
    expect((await fetch(detail(), { headers: other.headers })).status).toBe(200);
  });

  it('refuses a key from an address it is not allowed, held answer or not (D32)', async () => {
    const elsewhere = await identity.mintKey({
      accountId: 'acme',
      restrictions: { allowedIps: ['10.0.0.0/8'] },
    });
    for (let i = 0; i < 2; i++) {
      const response = await fetch(detail(), { headers: elsewhere.headers });
      expect(response.status).toBe(403);
      expect(await response.json()).toMatchObject({ code: 'ip_not_allowed' });
      expect(lastTakenFast()).toBe(false);
    }
    const here = await identity.mintKey({ accountId: 'acme', restrictions: { allowedIps: ['127.0.0.0/8'] } });
    expect((await fetch(detail(), { headers: here.headers })).status).toBe(200);
    expect((await fetch(detail(), { headers: here.headers })).status).toBe(200);
    expect(lastTakenFast()).toBe(true);
  });

  it("counts what it answers in the key's usage, as the hooks do (D32)", async () => {
    const key = await identity.mintKey({ accountId: 'acme' });
    const fast: boolean[] = [];
    for (let i = 0; i < 3; i++) {
      expect((await fetch(detail(), { headers: key.headers })).status).toBe(200);
      fast.push(lastTakenFast());
    }
    expect(fast).toEqual([false, true, true]);
    const usage = await app.inject({
      url: `/v3/identity/api-keys/${key.id}/usage?granularity=hour`,
      headers: await identity.tokenHeaders({ accounts: ['acme'] }),
    });
    expect(usage.statusCode, usage.body).toBe(200);
    const buckets = usage.json().buckets as { success: number }[];
    expect(buckets.reduce((sum, bucket) => sum + bucket.success, 0)).toBe(3);
    expect(usage.json().lastUsed).toMatchObject({ address: '127.0.0.1' });
  });
});
