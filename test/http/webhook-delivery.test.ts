import fs from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/program.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { sleep, waitFor } from '../helpers/wait.js';
import {
  Receiver,
  startWebhookInstance,
  TEST_WEBHOOK_ENV,
  userHeaders,
  type WebhookInstance,
} from '../helpers/webhooks.js';

/**
 * D28 on both stacks, with a real HTTP receiver: changes arrive signed as Standard Webhooks says (the
 * `standardwebhooks` package verifies them as a receiver would), failures are retried with the same
 * webhook-id, an account's endpoints get its own changes and the service's, never another account's,
 * and what is due is written in the change's own transaction.
 */

const BASE = '/v3/identity/webhook-endpoints';

class Discard extends Writable {
  override _write(_chunk: Buffer, _encoding: string, done: () => void): void {
    done();
  }
}

interface Attempt {
  eventId: string;
  type: string;
  attempt: number;
  outcome: string;
  statusCode?: number;
  error?: string;
  nextAttemptAt?: string;
  deliveryId: string;
  durationMs: number;
}

describe('webhook deliveries (D28)', () => {
  let backend: TestBackend;
  let instance: WebhookInstance;
  let receiver: Receiver;
  let other: Receiver;
  let ada: Record<string, string>;
  let writer: Record<string, string>;
  /** Made to fail the next write just before its commit. */
  let failNextCommit = false;

  beforeAll(async () => {
    backend = await createTestBackend();
    instance = await startWebhookInstance(backend, {
      beforeCommit: () => {
        if (failNextCommit) {
          failNextCommit = false;
          throw new Error('injected: the database went away before the commit');
        }
      },
    });
    receiver = await Receiver.start();
    other = await Receiver.start();
    ada = await userHeaders(instance, ['acme']);
    const key = await instance.services.identity.keys.createFor(
      { subject: 'ada', accounts: ['acme'] },
      { name: 'ci', accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] },
    );
    writer = { 'x-api-key': key.key };
  });
  afterAll(async () => {
    await instance?.close();
    await receiver?.close();
    await other?.close();
    await backend?.cleanup();
  });

  async function endpoint(
    url: string,
    events: string[] = ['*'],
    headers = ada,
    accountId = 'acme',
  ): Promise<{ id: string; secret: string }> {
    const created = await instance.app.inject({
      method: 'POST',
      url: BASE,
      headers,
      payload: { accountId, url, events },
    });
    expect(created.statusCode, created.body).toBe(201);
    return created.json();
  }

  async function attempts(endpointId: string, headers = ada): Promise<Attempt[]> {
    const answer = await instance.app.inject({
      url: `${BASE}/${endpointId}/deliveries?pageSize=100`,
      headers,
    });
    expect(answer.statusCode, answer.body).toBe(200);
    return answer.json().data;
  }

  const publish = (slug: string, resources = [publishedResource('intro')]) =>
    instance.app.inject({
      method: 'PUT',
      url: `/v3/playbook/catalogs/org/${slug}`,
      headers: writer,
      payload: { name: slug, version: '1', resources },
    });

  it('a publish arrives signed, verifies with the standardwebhooks verifier, and is listed as delivered', async () => {
    const hook = await endpoint(receiver.url('/signed'), ['catalog.created', 'resource.created']);
    const published = await publish('handbook');
    expect(published.statusCode, published.body).toBe(201);
    await waitFor('both events', () => receiver.at('/signed').length >= 2);
    await sleep(200);
    const verifier = new Webhook(hook.secret);
    const events = receiver.at('/signed');
    expect(events.map((r) => JSON.parse(r.body).type).sort()).toEqual([
      'catalog.created',
      'resource.created',
    ]);
    for (const request of events) {
      const payload = verifier.verify(request.body, request.headers) as {
        type: string;
        timestamp: string;
        data: Record<string, unknown>;
      };
      expect(request.headers['content-type']).toBe('application/json');
      expect(request.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
      expect(Math.abs(Number(request.headers['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(30);
      expect(payload.data.id).toBe(request.headers['webhook-id']);
      expect(payload.data).toMatchObject({ accountId: 'acme', owner: 'account', actor: { type: 'api-key' } });
      expect(payload.data.target).toMatchObject({ kind: payload.type.split('.')[0] });
      expect(typeof payload.data.summary).toBe('string');
    }
    // A signature under another secret, or of another body, does not verify.
    const [first] = events;
    expect(() =>
      new Webhook(`whsec_${Buffer.alloc(32, 7).toString('base64')}`).verify(first!.body, first!.headers),
    ).toThrow();
    expect(() => verifier.verify(`${first!.body} `, first!.headers)).toThrow();
    await waitFor('attempts recorded', async () => (await attempts(hook.id)).length === 2);
    for (const attempt of await attempts(hook.id)) {
      expect(attempt).toMatchObject({ attempt: 1, outcome: 'succeeded', statusCode: 204 });
      expect(attempt.nextAttemptAt).toBeUndefined();
      expect(attempt.durationMs).toBeGreaterThanOrEqual(0);
    }
    // One log line per attempt, naming the endpoint, the delivery, the status and the time, and
    // neither the secret nor the body.
    const lines = instance.logs.filter(
      (line) => line.msg === 'webhook attempt' && line.webhookEndpoint === hook.id,
    );
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      expect(line).toMatchObject({ status: 204, outcome: 'succeeded' });
      expect(typeof line.delivery).toBe('string');
      expect(typeof line.ms).toBe('number');
    }
    for (const raw of instance.rawLogs) {
      expect(raw).not.toContain(hook.secret.slice(6));
      expect(raw).not.toContain('"org/handbook/intro"');
    }
  });

  it('failures (500, a timeout, a redirect) are retried with the same webhook-id until one succeeds', async () => {
    const path = '/flaky';
    receiver.behaviour = (request, attempt) => {
      if (!request.body.includes('org/flaky') || !request.body.includes('catalog.created'))
        return { status: 204 };
      if (attempt === 1) return { status: 500 };
      if (attempt === 2) return { hold: true };
      if (attempt === 3) return { status: 302, headers: { location: `${receiver.url('/elsewhere')}` } };
      return { status: 200 };
    };
    try {
      const hook = await endpoint(receiver.url(path), ['catalog.created']);
      expect((await publish('flaky')).statusCode).toBe(201);
      await waitFor(
        'four attempts',
        async () => (await attempts(hook.id)).some((a) => a.outcome === 'succeeded'),
        15_000,
      );
      const made = (await attempts(hook.id)).reverse();
      expect(made.map((a) => [a.attempt, a.outcome, a.statusCode ?? null])).toEqual([
        [1, 'failed', 500],
        [2, 'failed', null],
        [3, 'failed', 302],
        [4, 'succeeded', 200],
      ]);
      expect(made[0]!.error).toBe('answered 500');
      expect(made[1]!.error).toMatch(/no answer within 1 s/);
      expect(made[2]!.error).toBe('redirect (302) not followed');
      for (const failed of made.slice(0, 3)) expect(failed.nextAttemptAt).toBeDefined();
      expect(new Set(made.map((a) => a.eventId)).size).toBe(1);
      const sent = receiver.at(path).filter((r) => r.headers['webhook-id'] === made[0]!.eventId);
      expect(sent).toHaveLength(4);
      // The redirect was not followed.
      expect(receiver.at('/elsewhere')).toEqual([]);
      const verifier = new Webhook(hook.secret);
      for (const request of sent) verifier.verify(request.body, request.headers);
      expect(new Set(sent.map((r) => r.body)).size).toBe(1);
    } finally {
      receiver.behaviour = () => ({ status: 204 });
    }
  });

  it('a refused connection is retried by the schedule, then the delivery has failed', async () => {
    const closed = await Receiver.start();
    const url = closed.url('/gone');
    await closed.close();
    const hook = await endpoint(url, ['catalog.created']);
    expect((await publish('refused')).statusCode).toBe(201);
    await waitFor('the schedule to run out', async () => (await attempts(hook.id)).length === 4, 15_000);
    await sleep(400);
    const made = await attempts(hook.id);
    expect(made).toHaveLength(4);
    for (const attempt of made)
      expect(attempt).toMatchObject({ outcome: 'failed', error: 'connection refused' });
    expect(made[0]!.nextAttemptAt).toBeUndefined();
    const delivery = await backend.databases.primary
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('id', '=', made[0]!.deliveryId)
      .executeTakeFirstOrThrow();
    expect(delivery).toMatchObject({ status: 'failed', attempts: 4 });
    const metrics = await instance.services.metrics.registry.getSingleMetricAsString(
      'playbook_webhook_deliveries_total',
    );
    expect(metrics).toMatch(/outcome="failed"\} [1-9]/);
    // Sent again on request: one more attempt, due at once, with the same event id.
    const retried = await instance.app.inject({
      method: 'POST',
      url: `${BASE}/${hook.id}/deliveries/${made[0]!.deliveryId}/retry`,
      headers: ada,
    });
    expect(retried.statusCode, retried.body).toBe(202);
    expect(retried.json()).toMatchObject({
      id: made[0]!.deliveryId,
      status: 'pending',
      eventId: made[0]!.eventId,
    });
    await waitFor('the fifth attempt', async () => (await attempts(hook.id)).length === 5);
    expect((await attempts(hook.id))[0]).toMatchObject({ attempt: 5, outcome: 'failed' });
  });

  it('retry sends a delivered event again, with the same webhook-id; a test event arrives signed', async () => {
    const hook = await endpoint(receiver.url('/again'), ['catalog.created']);
    expect((await publish('again')).statusCode).toBe(201);
    await waitFor('the delivery', async () => (await attempts(hook.id)).length === 1);
    const [first] = await attempts(hook.id);
    const retried = await instance.app.inject({
      method: 'POST',
      url: `${BASE}/${hook.id}/deliveries/${first!.deliveryId}/retry`,
      headers: ada,
    });
    expect(retried.statusCode).toBe(202);
    await waitFor('the second attempt', async () => (await attempts(hook.id)).length === 2);
    expect(receiver.at('/again').filter((r) => r.id === first!.eventId)).toHaveLength(2);
    const missing = await instance.app.inject({
      method: 'POST',
      url: `${BASE}/${hook.id}/deliveries/0190c2a4-0000-7000-8000-000000000000/retry`,
      headers: ada,
    });
    expect(missing.statusCode).toBe(404);

    const test = await instance.app.inject({ method: 'POST', url: `${BASE}/${hook.id}/test`, headers: ada });
    expect(test.statusCode, test.body).toBe(202);
    expect(test.json()).toMatchObject({ type: 'webhook.test', status: 'pending', attempts: 0 });
    await waitFor('the test event', () => receiver.received.some((r) => r.id === test.json().eventId));
    const request = receiver.received.find((r) => r.id === test.json().eventId)!;
    const payload = new Webhook(hook.secret).verify(request.body, request.headers) as {
      type: string;
      data: { id: string };
    };
    expect(payload).toMatchObject({ type: 'webhook.test', data: { id: test.json().eventId } });
  });

  it("an account's endpoints get its own changes and the service's, never another account's; the service's drafts go to none", async () => {
    const eve = await userHeaders(instance, ['globex'], 'eve');
    const globexHook = await endpoint(other.url('/globex'), ['*'], eve, 'globex');
    const acmeHook = await endpoint(receiver.url('/acme-all'), ['*']);
    expect((await publish('secret-plans')).statusCode).toBe(201);
    // The service's own Catalogs, one active and one draft, imported by an operator.
    const tree = path.join(backend.workDir, 'svc-tree');
    for (const [slug, status] of [
      ['public-guide', 'active'],
      ['unreleased', 'draft'],
    ] as const) {
      await fs.mkdir(path.join(tree, slug, 'resources'), { recursive: true });
      await fs.writeFile(
        path.join(tree, slug, 'catalog.json'),
        JSON.stringify({ name: slug, version: '1', status }),
      );
      await fs.writeFile(
        path.join(tree, slug, 'resources', 'doc.json'),
        JSON.stringify({
          kind: 'document',
          title: 'Doc',
          version: '1',
          mediaType: 'text/plain',
          content: slug,
          status,
        }),
      );
    }
    const code = await main(
      ['node', 'playbook', 'import', tree, '--owner', 'svc'],
      { ...backend.env, ...TEST_WEBHOOK_ENV },
      {
        stdout: new Discard(),
        stderr: new Discard(),
      },
    );
    expect(code).toBe(0);
    await waitFor('the service catalog at both', () =>
      [other, receiver].every((r) => r.received.some((q) => q.body.includes('svc/public-guide'))),
    );
    await waitFor('acme deliveries made', async () => {
      const made = await attempts(acmeHook.id);
      return made.some((a) => a.type === 'catalog.created') && made.length >= 3;
    });
    await sleep(500);
    // globex got the service's changes and its own (its endpoint's creation), nothing of acme's.
    const globexGot = other.at('/globex');
    expect(globexGot.length).toBeGreaterThan(0);
    for (const request of globexGot) {
      const event = JSON.parse(request.body);
      if (event.data.owner === 'account') expect(event.data.accountId, request.body).toBe('globex');
      expect(request.body).not.toContain('acme');
      expect(request.body).not.toContain('secret-plans');
      new Webhook(globexHook.secret).verify(request.body, request.headers);
    }
    // The service's changes carry what changed, not how or by whom.
    const svcCatalog = globexGot.find(
      (q) => q.body.includes('svc/public-guide') && JSON.parse(q.body).type === 'catalog.created',
    )!;
    const data = JSON.parse(svcCatalog.body).data;
    expect(data).toMatchObject({ owner: 'svc', target: { kind: 'catalog', humanRef: 'svc/public-guide' } });
    expect(data).not.toHaveProperty('summary');
    expect(data).not.toHaveProperty('actor');
    expect(data).not.toHaveProperty('accountId');
    // The draft's changes reached no one, and are not left due either.
    for (const r of [other, receiver])
      expect(r.received.some((q) => q.body.includes('unreleased'))).toBe(false);
    const changes = await loggedChanges(backend.databases.primary, 'svc');
    expect(changes.some((c) => c.target.humanRef === 'svc/unreleased')).toBe(true);
    const left = await backend.databases.primary
      .selectFrom('webhook_deliveries as d')
      .innerJoin('changes as c', 'c.seq', 'd.change_seq')
      .select('d.id')
      .where('c.target_ref', 'like', 'svc/unreleased%')
      .execute();
    expect(left).toEqual([]);
    // acme's own changes reached acme's endpoint.
    expect(receiver.at('/acme-all').some((q) => q.body.includes('org/secret-plans'))).toBe(true);
    expect(receiver.at('/acme-all').some((q) => q.body.includes('svc/public-guide'))).toBe(true);
  });

  it('what is due is written in the change transaction: a failure before the commit leaves neither', async () => {
    await endpoint(receiver.url('/atomic'), ['*']);
    const db = backend.databases.primary;
    const count = async () => {
      const deliveries = await db
        .selectFrom('webhook_deliveries')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow();
      const changes = await db
        .selectFrom('changes')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow();
      return [Number(deliveries.n), Number(changes.n)];
    };
    // Nothing in flight: the counts are stable.
    await sleep(300);
    const before = await count();
    failNextCommit = true;
    const failed = await publish('never-written');
    expect(failed.statusCode).toBe(500);
    expect(await count()).toEqual(before);
    const written = await publish('written');
    expect(written.statusCode).toBe(201);
    const [deliveries, changes] = await count();
    expect(changes).toBeGreaterThan(before[1]!);
    expect(deliveries).toBeGreaterThan(before[0]!);
    await waitFor('its delivery', () => receiver.received.some((r) => r.body.includes('org/written')));
    expect(receiver.received.some((r) => r.body.includes('never-written'))).toBe(false);
  });
});

describe('an endpoint failing for days is disabled, as a change of the log (D28)', () => {
  let backend: TestBackend;
  let instance: WebhookInstance;
  let receiver: Receiver;

  beforeAll(async () => {
    backend = await createTestBackend();
    // One second stands for five days.
    instance = await startWebhookInstance(backend, {
      env: {
        PLAYBOOK_WEBHOOK_DISABLE_AFTER_S: '1',
        PLAYBOOK_WEBHOOK_RETRY_SCHEDULE: '300ms,300ms,300ms,300ms,300ms,300ms',
      },
    });
    receiver = await Receiver.start();
    receiver.behaviour = () => ({ status: 503 });
  });
  afterAll(async () => {
    await instance?.close();
    await receiver?.close();
    await backend?.cleanup();
  });

  it('after the window of failures the endpoint is disabled by the service and receives nothing more', async () => {
    const ada = await userHeaders(instance, ['acme']);
    const created = await instance.app.inject({
      method: 'POST',
      url: BASE,
      headers: ada,
      payload: { accountId: 'acme', url: receiver.url('/down'), events: ['*'] },
    });
    const hook = created.json();
    const test = await instance.app.inject({ method: 'POST', url: `${BASE}/${hook.id}/test`, headers: ada });
    expect(test.statusCode).toBe(202);
    await waitFor(
      'the endpoint disabled',
      async () =>
        (await instance.app.inject({ url: `${BASE}/${hook.id}`, headers: ada })).json().status === 'disabled',
      10_000,
    );
    const changes = await loggedChanges(backend.databases.primary, 'acme');
    expect(changes.at(-1)).toMatchObject({
      type: 'webhook_endpoint.disabled',
      actor: { type: 'service' },
      target: { kind: 'webhook_endpoint', id: hook.id },
    });
    const audit = (
      await instance.app.inject({ url: '/v3/identity/audit-events?accountId=acme', headers: ada })
    ).json();
    expect(audit.data[0]).toMatchObject({ action: 'webhook_endpoint.disabled', actor: { type: 'service' } });
    // An attempt that began before the endpoint was disabled may still be on its way: its delivery's
    // lease is let go once its outcome is kept, which is after the endpoint answered it.
    await waitFor('no attempt in flight', async () => {
      const leased = await backend.databases.primary
        .selectFrom('webhook_deliveries')
        .select('id')
        .where('endpoint_id', '=', hook.id)
        .where('lease_token', 'is not', null)
        .execute();
      return leased.length === 0;
    });
    const seen = receiver.received.length;
    await sleep(800);
    expect(receiver.received.length).toBe(seen);
    // Enabled again, the delivery that waited goes on.
    receiver.behaviour = () => ({ status: 200 });
    const enabled = await instance.app.inject({
      method: 'PATCH',
      url: `${BASE}/${hook.id}`,
      headers: ada,
      payload: { status: 'enabled' },
    });
    expect(enabled.json().status).toBe('enabled');
    await waitFor('the waiting delivery', () => receiver.received.length > seen);
  });
});
