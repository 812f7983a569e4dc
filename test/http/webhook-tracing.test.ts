import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Metrics } from '../../src/observability/metrics.js';
import { startTracing, type Tracing } from '../../src/observability/tracing.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { type ExportedSpan, OtlpReceiver } from '../helpers/otlp-receiver.js';
import { waitFor } from '../helpers/wait.js';
import { Receiver, startWebhookInstance, userHeaders, type WebhookInstance } from '../helpers/webhooks.js';

const attribute = (span: ExportedSpan, key: string) =>
  span.attributes.find((a) => a.key === key)?.value?.stringValue;

/** D28, D25: a span per delivery attempt, naming the endpoint, the delivery and the status. */
describe('a span per webhook attempt (D28)', () => {
  const otlp = new OtlpReceiver();
  let traced: Tracing;
  let backend: TestBackend;
  let instance: WebhookInstance;
  let receiver: Receiver;

  beforeAll(async () => {
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = await otlp.start();
    traced = (await startTracing(process.env))!;
    backend = await createTestBackend();
    instance = await startWebhookInstance(backend, {
      observation: { metrics: new Metrics(), tracing: traced },
    });
    receiver = await Receiver.start();
  });
  afterAll(async () => {
    await instance?.close();
    await traced?.close();
    await receiver?.close();
    await backend?.cleanup();
    await otlp.stop();
    delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  });

  it('records webhook.attempt with the endpoint, the delivery, the type, the attempt and the status', async () => {
    const ada = await userHeaders(instance, ['acme']);
    const endpoint = (
      await instance.app.inject({
        method: 'POST',
        url: '/v3/identity/webhook-endpoints',
        headers: ada,
        payload: { accountId: 'acme', url: receiver.url('/traced'), events: ['catalog.created'] },
      })
    ).json();
    const test = (
      await instance.app.inject({
        method: 'POST',
        url: `/v3/identity/webhook-endpoints/${endpoint.id}/test`,
        headers: ada,
      })
    ).json();
    await waitFor('the delivery', () => receiver.at('/traced').length === 1);
    await waitFor('the span', async () => {
      await traced.flush();
      return otlp.spans.some((span) => span.name === 'webhook.attempt');
    });
    const span = otlp.spans.find((s) => s.name === 'webhook.attempt')!;
    expect(attribute(span, 'playbook.webhook.endpoint_id')).toBe(endpoint.id);
    expect(attribute(span, 'playbook.webhook.delivery_id')).toBe(test.id);
    expect(attribute(span, 'playbook.webhook.event_type')).toBe('webhook.test');
    expect(attribute(span, 'playbook.webhook.attempt')).toBe('1');
    expect(attribute(span, 'http.response.status_code')).toBe('204');
    expect(JSON.stringify(span)).not.toContain(endpoint.secret.slice(6));
  });
});
