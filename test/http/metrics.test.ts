import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readChangesAfter, readHead } from '../../src/changes/change-log.js';
import type { WriteName } from '../../src/changes/unit-of-work.js';
import { loadConfig } from '../../src/foundation/config.js';
import { Metrics, startMetricsServer } from '../../src/observability/metrics.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';

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

/** The series of `names` that moved from one scrape to the next, by how much (none moved: `{}`). */
function moved(before: Scrape, after: Scrape, names: readonly string[]): Record<string, number> {
  const deltas: Record<string, number> = {};
  for (const [series, now] of after) {
    if (!names.some((name) => series.startsWith(`${name}{`))) continue;
    const delta = now - (before.get(series) ?? 0);
    if (delta !== 0) deltas[series] = delta;
  }
  return deltas;
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
  /** What the next write does just before its commit, once its changes are appended. */
  let beforeCommit: ((write: WriteName) => void) | undefined;

  beforeAll(async () => {
    // One set of metrics for everything, as the service composes it: the databases' and the app's.
    const observation = { metrics: new Metrics() };
    backend = await createTestBackend({ observation });
    identity = createTestIdentity(backend, {
      env: { PLAYBOOK_AUTH_FAILURE_MAX: '3' },
      metrics: observation.metrics,
      beforeCommit: (write) => beforeCommit?.(write),
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
    await app.inject({ url: '/v3/playbook/catalogs/svc/handbook', headers: key.headers });
    await app.inject({ url: '/v3/playbook/catalogs/svc/handbook/resources/intro', headers: key.headers });
    await app.inject({ url: '/v3/playbook/catalogs/svc/handbook/resources/nothing', headers: key.headers });
    await app.inject({ url: '/no/such/path/8f1e2d' });
    const after = await scrape();
    const delta = (labels: Record<string, string>) =>
      value(after, 'playbook_http_requests_total', labels) -
      value(before, 'playbook_http_requests_total', labels);
    expect(delta({ operation: 'listPlaybookCatalogs', method: 'GET', status: '200' })).toBe(3);
    expect(delta({ operation: 'listPlaybookCatalogs', method: 'HEAD', status: '200' })).toBe(1);
    expect(delta({ operation: 'getPlaybookResource', method: 'GET', status: '200' })).toBe(1);
    expect(delta({ operation: 'getPlaybookResource', method: 'GET', status: '404' })).toBe(1);
    expect(delta({ operation: 'getPlaybookCatalog', method: 'GET', status: '200' })).toBe(1);
    expect(delta({ operation: 'getPlaybookResourceByRef', method: 'GET', status: '200' })).toBe(1);
    expect(delta({ operation: 'getPlaybookResourceByRef', method: 'GET', status: '404' })).toBe(1);
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

  /**
   * D26: every write's transaction is counted by write and outcome, and a committed write's changes by
   * type. Each case compares every series of the two counters before and after one write: the series
   * named move by exactly the amount given, and no other moves.
   */
  describe("the unit of work's transactions and changes (D26)", () => {
    const WRITE_SERIES = ['playbook_write_transactions_total', 'playbook_changes_appended_total'];
    const transactions = (write: WriteName, outcome: string, count: number) => ({
      [`playbook_write_transactions_total{write="${write}",outcome="${outcome}"}`]: count,
    });
    /** The changes the log gained since `head`, counted by type as the counter renders them. */
    const loggedSince = async (head: number) => {
      const counts: Record<string, number> = {};
      for (const change of await readChangesAfter(backend.databases.primary, head, 10_000)) {
        const series = `playbook_changes_appended_total{type="${change.type}"}`;
        counts[series] = (counts[series] ?? 0) + 1;
      }
      return counts;
    };
    /** Runs `write` with `inject` as the hook before each commit; what moved, and the log's new changes. */
    const measure = async (
      write: () => Promise<{ statusCode: number; body: string }>,
      inject?: (write: WriteName) => void,
    ) => {
      const before = await scrape();
      const head = await readHead(backend.databases.primary);
      beforeCommit = inject;
      let answer: { statusCode: number; body: string };
      try {
        answer = await write();
      } finally {
        beforeCommit = undefined;
      }
      return { answer, moved: moved(before, await scrape(), WRITE_SERIES), logged: await loggedSince(head) };
    };
    const putResource = (slug: string) => {
      const { slug: _slug, ...body } = publishedResource(slug);
      return app.inject({
        method: 'PUT',
        url: `/v3/playbook/catalogs/org/counted/resources/${slug}`,
        headers: key.headers,
        payload: body,
      });
    };
    /** What a concurrent writer makes a transaction fail with on PostgreSQL: a serialization failure. */
    const conflict = () => {
      throw Object.assign(new Error('could not serialize access'), { code: '40001' });
    };

    it('a committed write: committed once, and each change it logged counted once by type', async () => {
      const catalog = await measure(() =>
        app.inject({
          method: 'PUT',
          url: '/v3/playbook/catalogs/org/counted',
          headers: key.headers,
          payload: {
            name: 'Counted',
            version: '1',
            resources: [publishedResource('one'), publishedResource('two')],
          },
        }),
      );
      expect(catalog.answer.statusCode, catalog.answer.body).toBe(201);
      expect(catalog.logged).toMatchObject({
        'playbook_changes_appended_total{type="catalog.created"}': 1,
        'playbook_changes_appended_total{type="resource.created"}': 2,
      });
      expect(catalog.moved).toEqual({
        ...transactions('publish-catalog', 'committed', 1),
        ...catalog.logged,
      });

      const token = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
      const created = await measure(() =>
        app.inject({
          method: 'POST',
          url: '/v3/identity/api-keys',
          headers: token,
          payload: { name: 'counted', accountId: 'acme', scopes: ['playbook:read'] },
        }),
      );
      expect(created.answer.statusCode, created.answer.body).toBe(201);
      expect(created.moved).toEqual({
        ...transactions('key-create', 'committed', 1),
        'playbook_changes_appended_total{type="api_key.created"}': 1,
      });
      expect(created.logged).toEqual({ 'playbook_changes_appended_total{type="api_key.created"}': 1 });
    });

    it('a conflict tried again: one conflict, one commit, and the changes of the commit alone', async () => {
      let conflicts = 1;
      const seen: WriteName[] = [];
      const retried = await measure(
        () => putResource('retried'),
        (write) => {
          seen.push(write);
          if (conflicts-- > 0) conflict();
        },
      );
      expect(retried.answer.statusCode, retried.answer.body).toBe(201);
      expect(seen).toEqual(['publish-resource', 'publish-resource']);
      // The first attempt appended its change too, and rolled it back: it is neither logged nor counted.
      expect(retried.logged).toEqual({ 'playbook_changes_appended_total{type="resource.created"}': 1 });
      expect(retried.moved).toEqual({
        ...transactions('publish-resource', 'conflict', 1),
        ...transactions('publish-resource', 'committed', 1),
        ...retried.logged,
      });
    });

    it('503 after the last attempt: five conflicts, one busy, no commit and no change', async () => {
      const gaveUp = await measure(() => putResource('contended'), conflict);
      expect(gaveUp.answer.statusCode).toBe(503);
      expect(JSON.parse(gaveUp.answer.body)).toMatchObject({ code: 'unavailable' });
      expect(gaveUp.logged).toEqual({});
      expect(gaveUp.moved).toEqual({
        ...transactions('publish-resource', 'conflict', 5),
        ...transactions('publish-resource', 'busy', 1),
      });
    });

    it('a write rolled back by a failure: one failed, no commit and no change', async () => {
      const failed = await measure(
        () => putResource('rolled-back'),
        () => {
          throw new Error('injected: the connection went away before the commit');
        },
      );
      expect(failed.answer.statusCode).toBe(500);
      expect(failed.logged).toEqual({});
      expect(failed.moved).toEqual(transactions('publish-resource', 'failed', 1));
    });
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
