import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { waitFor } from '../helpers/wait.js';
import { Receiver, startWebhookInstance, WebhookAccount, type WebhookInstance } from '../helpers/webhooks.js';

/**
 * D28: what waits for one endpoint is bounded. Below `PLAYBOOK_WEBHOOK_MAX_PENDING_PER_ENDPOINT`
 * pending deliveries nothing is lost; past it the oldest are failed unsent, listed with the reason
 * `backlog_exceeded`, and can be sent again like any failed delivery.
 */

const MAX_PENDING = 5;

describe('the bound on deliveries pending to one endpoint (D28)', () => {
  let backend: TestBackend;
  let instance: WebhookInstance;
  let receiver: Receiver;
  let acme: WebhookAccount;

  beforeAll(async () => {
    backend = await createTestBackend();
    receiver = await Receiver.start();
    // The dispatcher waits until the test starts it: what is pending stays so meanwhile.
    instance = await startWebhookInstance(backend, {
      deliver: false,
      env: { PLAYBOOK_WEBHOOK_MAX_PENDING_PER_ENDPOINT: String(MAX_PENDING) },
    });
    acme = await WebhookAccount.of(instance, 'acme');
  });
  afterAll(async () => {
    await instance?.close();
    await receiver?.close();
    await backend?.cleanup();
  });

  /** The endpoint's deliveries, oldest change first, with their status. */
  const deliveries = (endpointId: string) =>
    backend.databases.primary
      .selectFrom('webhook_deliveries')
      .select(['id', 'event_id', 'status', 'attempts'])
      .where('endpoint_id', '=', endpointId)
      .orderBy('change_seq')
      .execute();
  const pendingCount = async (endpointId: string) =>
    (
      await backend.databases.primary
        .selectFrom('webhook_endpoints')
        .select('pending_deliveries')
        .where('id', '=', endpointId)
        .executeTakeFirstOrThrow()
    ).pending_deliveries;

  it('keeps every delivery up to the bound; past it fails the oldest as backlog_exceeded; those can be retried', async () => {
    const hook = await acme.endpoint(receiver.url('/backlog'), ['catalog.created']);
    // One change a write: each delivery is older than the next.
    for (let i = 0; i < MAX_PENDING; i++) await acme.publish(`kept-${i}`);
    expect((await deliveries(hook.id)).map((d) => d.status)).toEqual(Array(MAX_PENDING).fill('pending'));
    expect(await pendingCount(hook.id)).toBe(MAX_PENDING);
    expect(await acme.attempts(hook.id)).toEqual([]);

    for (let i = 0; i < 3; i++) await acme.publish(`over-${i}`);
    const all = await deliveries(hook.id);
    expect(all.map((d) => d.status)).toEqual([
      ...Array(3).fill('failed'),
      ...Array(MAX_PENDING).fill('pending'),
    ]);
    expect(await pendingCount(hook.id)).toBe(MAX_PENDING);
    const failed = all.slice(0, 3);
    const listed = await acme.attempts(hook.id);
    expect(listed).toHaveLength(3);
    for (const attempt of listed) {
      expect(attempt).toMatchObject({
        type: 'catalog.created',
        attempt: 1,
        outcome: 'failed',
        reason: 'backlog_exceeded',
        durationMs: 0,
      });
      expect(attempt.statusCode).toBeUndefined();
      expect(attempt.nextAttemptAt).toBeUndefined();
      expect(attempt.error).toMatch(/more than 5 deliveries were pending/);
    }
    expect(new Set(listed.map((a) => a.deliveryId))).toEqual(new Set(failed.map((d) => d.id)));
    const counted = await instance.services.metrics.registry.getSingleMetricAsString(
      'playbook_webhook_deliveries_total',
    );
    expect(counted).toMatch(/outcome="failed"\} 3/);
    // Said once for the endpoint, not once a change.
    const warnings = instance.logs.filter((line) => line.webhookEndpoint === hook.id && line.level === 40);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ failed: 1 });
    expect(warnings[0]!.msg).toMatch(/PLAYBOOK_WEBHOOK_MAX_PENDING_PER_ENDPOINT/);

    // What was kept is delivered, and nothing of what failed.
    instance.services.webhookDispatcher.start();
    await waitFor('the deliveries kept', () => receiver.at('/backlog').length === MAX_PENDING);
    const sent = new Set(receiver.at('/backlog').map((r) => r.id));
    expect(sent).toEqual(new Set(all.slice(3).map((d) => d.event_id)));
    await waitFor('nothing pending', async () => (await pendingCount(hook.id)) === 0);

    // Sent again on request, as any failed delivery: the next attempt, due at once.
    const retried = await instance.app.inject({
      method: 'POST',
      url: `/v3/identity/webhook-endpoints/${hook.id}/deliveries/${failed[0]!.id}/retry`,
      headers: acme.user,
    });
    expect(retried.statusCode, retried.body).toBe(202);
    expect(retried.json()).toMatchObject({ id: failed[0]!.id, status: 'pending', attempts: 1 });
    await waitFor('the retried delivery', () =>
      receiver.at('/backlog').some((r) => r.id === failed[0]!.event_id),
    );
    await waitFor('its attempt listed', async () =>
      (await acme.attempts(hook.id)).some((a) => a.deliveryId === failed[0]!.id && a.outcome === 'succeeded'),
    );
    const again = (await acme.attempts(hook.id)).find(
      (a) => a.deliveryId === failed[0]!.id && a.attempt === 2,
    );
    expect(again).toMatchObject({ outcome: 'succeeded', statusCode: 204 });
    expect(again?.reason).toBeUndefined();
    await waitFor('nothing pending again', async () => (await pendingCount(hook.id)) === 0);
  }, 30_000);
});
