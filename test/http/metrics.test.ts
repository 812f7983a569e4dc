import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/foundation/config.js';
import { Metrics, startMetricsServer } from '../../src/observability/metrics.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';

/** One scrape, as `name{labels}` → value. */
type Scrape = Map<string, number>;

function parse(text: string): Scrape {
  const samples = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

/** The value of one sample, 0 when the series does not exist yet. */
const value = (scrape: Scrape, name: string, labels: Record<string, string> = {}) => {
  const rendered = Object.entries(labels)
    .map(([key, v]) => `${key}="${v}"`)
    .join(',');
  return scrape.get(rendered === '' ? name : `${name}{${rendered}}`) ?? 0;
};

/**
 * D25: `GET /metrics` on its own listener. Counters are of this process, so each test compares a scrape
 * after known traffic with one before it: the differences are exact.
 */
describe('metrics (D25)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let metrics: { address: string; close(): Promise<void> };
  let key: { id: string; key: string; headers: Record<string, string> };
  let resourceId: string;
  let versionId: string;

  beforeAll(async () => {
    // One set of metrics for everything, as the service composes it: the databases' and the app's.
    const observation = { metrics: new Metrics() };
    backend = await createTestBackend({ observation });
    identity = createTestIdentity(backend, {
      env: { PLAYBOOK_AUTH_FAILURE_MAX: '3' },
      metrics: observation.metrics,
    });
    app = await buildIdentityApp(backend, identity);
    metrics = await startMetricsServer(observation.metrics, { port: 0, host: '127.0.0.1' });
    await givenAccount(backend.databases.primary, 'acme');
    const catalog = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    const resource = await givenResource(backend, catalog, { slug: 'intro' });
    resourceId = resource.id;
    versionId = resource.currentVersionId;
    key = await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] });
  });
  afterAll(async () => {
    await metrics.close();
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const scrape = async (): Promise<Scrape> => {
    const answer = await fetch(`${metrics.address}/metrics`);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    return parse(await answer.text());
  };

  it('counts requests by operation, method and status, with a duration per request', async () => {
    const before = await scrape();
    for (let i = 0; i < 3; i++) {
      expect((await app.inject({ url: '/v3/playbook/catalogs', headers: key.headers })).statusCode).toBe(200);
    }
    await app.inject({ method: 'HEAD', url: '/v3/playbook/catalogs', headers: key.headers });
    await app.inject({ url: `/v3/playbook/resources/${resourceId}`, headers: key.headers });
    await app.inject({
      url: '/v3/playbook/resources/0190f0c8-0000-7000-8000-000000000000',
      headers: key.headers,
    });
    await app.inject({ url: '/no/such/path/8f1e2d' });
    const after = await scrape();
    const delta = (labels: Record<string, string>) =>
      value(after, 'playbook_http_requests_total', labels) -
      value(before, 'playbook_http_requests_total', labels);
    expect(delta({ operation: 'listPlaybookCatalogs', method: 'GET', status: '200' })).toBe(3);
    expect(delta({ operation: 'listPlaybookCatalogs', method: 'HEAD', status: '200' })).toBe(1);
    expect(delta({ operation: 'getPlaybookResource', method: 'GET', status: '200' })).toBe(1);
    expect(delta({ operation: 'getPlaybookResource', method: 'GET', status: '404' })).toBe(1);
    expect(delta({ operation: 'unmatched', method: 'GET', status: '404' })).toBe(1);
    const count = (scrapeOf: Scrape) =>
      value(scrapeOf, 'playbook_http_request_duration_seconds_count', {
        operation: 'listPlaybookCatalogs',
        method: 'GET',
        status: '200',
      });
    expect(count(after) - count(before)).toBe(3);
    const fast = (scrapeOf: Scrape) =>
      value(scrapeOf, 'playbook_http_request_duration_seconds_bucket', {
        le: '10',
        operation: 'listPlaybookCatalogs',
        method: 'GET',
        status: '200',
      });
    expect(fast(after) - fast(before)).toBe(3);
    // Labels are operation ids and words: never a path, an id, a key or an account.
    const text = [...after.keys()].join('\n');
    for (const secret of ['8f1e2d', '0190f0c8', resourceId, key.id, key.key, 'acme']) {
      expect(text).not.toContain(secret);
    }
  });

  it('counts authentications by kind, outcome and reason, and 429s by limit', async () => {
    const before = await scrape();
    await app.inject({ url: '/v3/playbook/catalogs', headers: key.headers });
    await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': 'svc_sk_test_nope' } });
    await app.inject({ url: '/v3/playbook/catalogs' });
    await app.inject({ url: '/v3/playbook/catalogs', headers: { authorization: 'Basic YTpi' } });
    // The address has now failed three times: the fourth failure is refused with 429.
    const limited = await app.inject({
      url: '/v3/playbook/catalogs',
      headers: { 'x-api-key': 'svc_sk_test_nope' },
    });
    expect(limited.statusCode).toBe(429);
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string>) =>
      value(after, name, labels) - value(before, name, labels);
    const auth = 'playbook_authentications_total';
    expect(delta(auth, { kind: 'api_key', outcome: 'accepted', reason: '' })).toBe(1);
    expect(delta(auth, { kind: 'api_key', outcome: 'refused', reason: 'malformed' })).toBe(2);
    expect(delta(auth, { kind: 'none', outcome: 'refused', reason: 'missing' })).toBe(1);
    expect(delta(auth, { kind: 'access_token', outcome: 'refused', reason: 'malformed' })).toBe(1);
    expect(delta('playbook_rate_limit_refusals_total', { limit: 'auth_failures' })).toBe(1);
  });

  it('times database statements and content-store calls, and counts answer-cache hits and misses', async () => {
    const before = await scrape();
    const url = `/v3/playbook/resources/${resourceId}/versions/${versionId}`;
    await app.inject({ url, headers: key.headers });
    await app.inject({ url, headers: key.headers });
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string>) =>
      value(after, name, labels) - value(before, name, labels);
    expect(delta('playbook_answer_cache_lookups_total', { result: 'hit' })).toBeGreaterThanOrEqual(1);
    expect(delta('playbook_answer_cache_lookups_total', { result: 'miss' })).toBeGreaterThanOrEqual(1);
    const queries = delta('playbook_database_query_duration_seconds_count', {
      database: 'primary',
      outcome: 'ok',
    });
    const readerQueries = delta('playbook_database_query_duration_seconds_count', {
      database: 'reader',
      outcome: 'ok',
    });
    expect(queries + readerQueries).toBeGreaterThan(0);
  });

  it('counts publications by outcome, with their duration', async () => {
    const before = await scrape();
    const body = {
      name: 'Handbook',
      version: '1',
      resources: [
        { slug: 'a', kind: 'document', title: 'A', version: '1', mediaType: 'text/plain', content: 'a' },
      ],
    };
    const put = () =>
      app.inject({
        method: 'PUT',
        url: '/v3/playbook/catalogs/org/measured',
        headers: key.headers,
        payload: body,
      });
    expect((await put()).statusCode).toBe(201);
    expect((await put()).statusCode).toBe(200);
    // A Catalog version publication, beside the planner's writes, is counted too.
    const version = () =>
      app.inject({
        method: 'POST',
        url: '/v3/playbook/catalogs/org/measured/versions',
        headers: key.headers,
        payload: { version: '2' },
      });
    expect((await version()).statusCode).toBe(201);
    expect((await version()).statusCode).toBe(200);
    const after = await scrape();
    const delta = (labels: Record<string, string>) =>
      value(after, 'playbook_catalog_writes_total', labels) -
      value(before, 'playbook_catalog_writes_total', labels);
    expect(delta({ via: 'publish', outcome: 'changed' })).toBe(2);
    expect(delta({ via: 'publish', outcome: 'unchanged' })).toBe(2);
    expect(
      value(after, 'playbook_catalog_write_duration_seconds_count', { via: 'publish' }) -
        value(before, 'playbook_catalog_write_duration_seconds_count', { via: 'publish' }),
    ).toBe(4);
  });

  it('serves the process metrics, and nothing but GET /metrics; the API port has no /metrics', async () => {
    const text = await (await fetch(`${metrics.address}/metrics`)).text();
    expect(text).toContain('# TYPE process_cpu_user_seconds_total counter');
    expect(text).toContain('nodejs_eventloop_lag_p99_seconds');
    expect((await fetch(`${metrics.address}/other`)).status).toBe(404);
    expect((await fetch(`${metrics.address}/metrics`, { method: 'POST' })).status).toBe(404);
    expect((await app.inject({ url: '/metrics' })).statusCode).toBe(404);
  });

  it('listens only when PLAYBOOK_METRICS_PORT is set, on loopback unless PLAYBOOK_METRICS_HOST says otherwise', () => {
    expect(loadConfig({}).metrics).toBeUndefined();
    expect(loadConfig({ PLAYBOOK_METRICS_PORT: '9464' }).metrics).toEqual({ port: 9464, host: '127.0.0.1' });
    expect(loadConfig({ PLAYBOOK_METRICS_PORT: '9464', PLAYBOOK_METRICS_HOST: '0.0.0.0' }).metrics).toEqual({
      port: 9464,
      host: '0.0.0.0',
    });
    expect(() => loadConfig({ PLAYBOOK_METRICS_PORT: 'abc' })).toThrow('PLAYBOOK_METRICS_PORT');
  });
});
