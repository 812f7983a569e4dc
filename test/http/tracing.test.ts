import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { observedStore } from '../../src/content/observed-store.js';
import { Metrics } from '../../src/observability/metrics.js';
import { startTracing, type Tracing } from '../../src/observability/tracing.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';
import { type ExportedSpan, OtlpReceiver } from '../helpers/otlp-receiver.js';

const attribute = (span: ExportedSpan, key: string) => {
  const found = span.attributes.find((a) => a.key === key)?.value;
  return found?.stringValue ?? (found?.intValue === undefined ? undefined : Number(found.intValue));
};

/** D25: a span per request, named by operation id, in the caller's trace, with storage calls below it. */
describe('traces through OpenTelemetry (D25)', () => {
  const receiver = new OtlpReceiver();
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let traced: Tracing;
  let headers: Record<string, string>;
  let resourceId: string;
  let versionId: string;

  beforeAll(async () => {
    const endpoint = await receiver.start();
    // The exporter reads the standard variables from the environment, as it does in production.
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = endpoint;
    process.env.OTEL_SERVICE_NAME = 'playbook-test';
    traced = (await startTracing(process.env))!;
    // The databases and the object store traced as the service composes them (storage.ts).
    const observation = { metrics: new Metrics(), tracing: traced };
    backend = await createTestBackend({ observation });
    identity = createTestIdentity(backend, { metrics: observation.metrics });
    app = await buildIdentityApp(backend, identity, undefined, {
      tracing: traced,
      objectStore: observedStore(backend.objectStore, observation),
    });
    await givenAccount(backend.databases.primary, 'acme');
    const catalog = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    const resource = await givenResource(backend, catalog, { slug: 'intro' });
    resourceId = resource.id;
    versionId = resource.currentVersionId;
    headers = (await identity.mintKey({ accountId: 'acme' })).headers;
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await traced.close();
    await backend.cleanup();
    await receiver.stop();
    delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  });

  it('is off, and loads nothing, when no OTLP endpoint is configured', async () => {
    expect(await startTracing({})).toBeUndefined();
    expect(
      await startTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x', OTEL_SDK_DISABLED: 'true' }),
    ).toBeUndefined();
  });

  it("names the request's span by operation id, continues the caller's trace, and hangs storage calls below it", async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parentId = '00f067aa0ba902b7';
    const answer = await app.inject({
      url: `/v3/playbook/resources/${resourceId}/versions/${versionId}`,
      headers: { ...headers, traceparent: `00-${traceId}-${parentId}-01` },
    });
    expect(answer.statusCode).toBe(200);
    await traced.flush();
    expect(receiver.paths).toContain('/v1/traces');
    const request = receiver.spans.find((span) => span.name === 'getPlaybookResourceVersion');
    expect(request).toBeDefined();
    expect(request!.traceId).toBe(traceId);
    expect(request!.parentSpanId).toBe(parentId);
    expect(attribute(request!, 'http.response.status_code')).toBe(200);
    expect(attribute(request!, 'playbook.request_id')).toBe(answer.headers['x-request-id']);
    const children = receiver.spans.filter((span) => span.parentSpanId === request!.spanId);
    expect(children.length).toBeGreaterThan(0);
    expect(children.every((span) => span.traceId === traceId)).toBe(true);
    expect(children.map((span) => span.name)).toContain('db.query');
  });

  it('starts a new trace for a request without traceparent, and names unrouted requests `unmatched`', async () => {
    receiver.spans.length = 0;
    await app.inject({ url: '/v3/playbook/catalogs', headers });
    await app.inject({ url: '/nowhere' });
    await traced.flush();
    const list = receiver.spans.find((span) => span.name === 'listPlaybookCatalogs');
    expect(list?.parentSpanId ?? '').toBe('');
    expect(list?.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(receiver.spans.map((span) => span.name)).toContain('unmatched');
  });
});
