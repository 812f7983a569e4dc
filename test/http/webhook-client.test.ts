import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CreatedWebhookEndpoint,
  Playbook,
  PlaybookError,
  verifyWebhook,
  WebhookVerificationError,
} from '../../clients/typescript/src/index.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { waitFor } from '../helpers/wait.js';
import { Receiver, startWebhookInstance, type WebhookInstance } from '../helpers/webhooks.js';

/**
 * D28 through the client (D24): endpoint management with an access token, and `verifyWebhook` for
 * receivers, tested against deliveries the service signed and against the `standardwebhooks` package.
 */

describe('the client: webhook endpoints and verifyWebhook (D28)', () => {
  let backend: TestBackend;
  let instance: WebhookInstance;
  let receiver: Receiver;
  let playbook: Playbook;
  let endpoint: CreatedWebhookEndpoint;

  beforeAll(async () => {
    backend = await createTestBackend();
    instance = await startWebhookInstance(backend);
    receiver = await Receiver.start();
    const baseUrl = await listenLocally(instance.app);
    const signer = instance.services.identity.signer!;
    const accessToken = await signer.mint({ subject: 'ada', accounts: ['acme'], ttlSeconds: 3600 });
    playbook = new Playbook({ accessToken, baseUrl, maxRetries: 0 });
    endpoint = await playbook.webhookEndpoints.create({
      accountId: 'acme',
      url: receiver.url('/client'),
      events: ['webhook_endpoint.updated'],
      description: 'made by the client',
    });
  });
  afterAll(async () => {
    await instance?.close();
    await receiver?.close();
    await backend?.cleanup();
  });

  it('manages endpoints: create (secret once), list, iterate, get, update, test, deliveries, retry, delete', async () => {
    expect(endpoint.secret).toMatch(/^whsec_/);
    const listed = await playbook.webhookEndpoints.list({ accountId: 'acme' });
    expect(listed.data.map((e) => e.id)).toEqual([endpoint.id]);
    expect(listed.data[0]).not.toHaveProperty('secret');
    const all = [];
    for await (const item of playbook.webhookEndpoints.iterate({ accountId: 'acme', pageSize: 1 }))
      all.push(item);
    expect(all).toHaveLength(1);
    expect((await playbook.webhookEndpoints.get(endpoint.id)).description).toBe('made by the client');
    const updated = await playbook.webhookEndpoints.update(endpoint.id, {
      description: 'changed by the client',
    });
    expect(updated.description).toBe('changed by the client');
    const test = await playbook.webhookEndpoints.test(endpoint.id);
    expect(test.type).toBe('webhook.test');
    await waitFor(
      'two deliveries',
      async () => (await playbook.webhookEndpoints.deliveries(endpoint.id)).data.length === 2,
    );
    const attempts = [];
    for await (const attempt of playbook.webhookEndpoints.iterateDeliveries(endpoint.id, { pageSize: 1 })) {
      attempts.push(attempt);
    }
    expect(attempts.map((a) => a.type).sort()).toEqual(['webhook.test', 'webhook_endpoint.updated']);
    const retried = await playbook.webhookEndpoints.retryDelivery(endpoint.id, attempts[0]!.deliveryId);
    expect(retried.status).toBe('pending');
    await waitFor(
      'the retry',
      async () => (await playbook.webhookEndpoints.deliveries(endpoint.id)).meta.total === 3,
    );
    const refused = await playbook.webhookEndpoints
      .create({ accountId: 'acme', url: 'ftp://x.example.com/', events: ['*'] })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(PlaybookError);
    expect((refused as PlaybookError).status).toBe(400);
    const other = await playbook.webhookEndpoints.create({
      accountId: 'acme',
      url: receiver.url('/deleted'),
      events: ['*'],
    });
    await playbook.webhookEndpoints.delete(other.id);
    const gone = await playbook.webhookEndpoints.get(other.id).catch((error: unknown) => error);
    expect((gone as PlaybookError).status).toBe(404);
  });

  it('verifyWebhook accepts what the service signed, from Node headers and from a Headers object', async () => {
    await waitFor('a delivery', () => receiver.at('/client').length > 0);
    for (const request of receiver.at('/client')) {
      const event = await verifyWebhook(endpoint.secret, request.headers, request.body);
      expect(event.data.id).toBe(request.headers['webhook-id']);
      const fromHeaders = await verifyWebhook(
        endpoint.secret,
        new Headers(request.headers),
        Buffer.from(request.body),
      );
      expect(fromHeaders).toEqual(event);
      // The standardwebhooks package agrees.
      expect(new Webhook(endpoint.secret).verify(request.body, request.headers)).toEqual(event);
    }
  });

  describe('verifyWebhook against deliveries the standardwebhooks package signs', () => {
    const secret = `whsec_${Buffer.alloc(24, 9).toString('base64')}`;
    const id = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
    const body = JSON.stringify({
      type: 'catalog.created',
      timestamp: '2026-01-01T00:00:00.000Z',
      data: { id },
    });
    const signedAt = (date: Date) => ({
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(date.getTime() / 1000)),
      'webhook-signature': new Webhook(secret).sign(id, date, body),
    });
    const rejects = (promise: Promise<unknown>, message: RegExp) =>
      expect(promise).rejects.toSatisfy(
        (error: unknown) => error instanceof WebhookVerificationError && message.test(error.message),
      );

    it('accepts a fresh one, and one of several signatures (a secret being replaced)', async () => {
      const headers = signedAt(new Date());
      expect((await verifyWebhook(secret, headers, body)).type).toBe('catalog.created');
      const other = new Webhook(`whsec_${Buffer.alloc(24, 1).toString('base64')}`).sign(id, new Date(), body);
      const both = { ...headers, 'webhook-signature': `${other} ${headers['webhook-signature']}` };
      expect((await verifyWebhook(secret, both, body)).type).toBe('catalog.created');
      const fourMinutesAgo = signedAt(new Date(Date.now() - 240_000));
      expect((await verifyWebhook(secret, fourMinutesAgo, body)).type).toBe('catalog.created');
    });

    it('refuses another secret, another body, a stale or future timestamp, a missing header, a v2 signature', async () => {
      const headers = signedAt(new Date());
      await rejects(
        verifyWebhook(`whsec_${Buffer.alloc(24, 2).toString('base64')}`, headers, body),
        /no signature/,
      );
      await rejects(verifyWebhook(secret, headers, body.replace('catalog', 'resource')), /no signature/);
      await rejects(verifyWebhook(secret, signedAt(new Date(Date.now() - 6 * 60_000)), body), /too far/);
      await rejects(verifyWebhook(secret, signedAt(new Date(Date.now() + 6 * 60_000)), body), /too far/);
      const { 'webhook-id': _id, ...noId } = headers;
      await rejects(verifyWebhook(secret, noId, body), /missing/);
      const v2 = { ...headers, 'webhook-signature': headers['webhook-signature'].replace('v1,', 'v2,') };
      await rejects(verifyWebhook(secret, v2, body), /no signature/);
      await rejects(verifyWebhook(secret, { ...headers, 'webhook-timestamp': 'soon' }, body), /not a number/);
    });
  });
});
