import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { waitFor } from '../helpers/wait.js';
import {
  type ListedAttempt,
  mostAtOnce,
  Receiver,
  spans,
  startWebhookInstance,
  WebhookAccount,
  type WebhookInstance,
} from '../helpers/webhooks.js';

/**
 * D28: an instance's attempts are shared fairly between accounts. Endpoints of one account that
 * never answer, with changes queued to them, hold at most half the slots while another account has
 * deliveries waiting, so that the other's deliveries are attempted within seconds whatever the first
 * one's endpoints do; an endpoint that keeps timing out is tried one attempt at a time with a 2 s
 * timeout, on every instance, until a 2xx.
 */

const TIMEOUT_MS = 3000;

/** Receivers that accept and never answer (`/hang/…`), and answer others at once. */
function hangingReceiver(receiver: Receiver): void {
  receiver.behaviour = (request) => (request.path.startsWith('/hang/') ? { hold: true } : { status: 204 });
}

describe("one account's hanging endpoints hold up no other account's deliveries (D28)", () => {
  let backend: TestBackend;
  let instance: WebhookInstance;
  let receiver: Receiver;
  let acme: WebhookAccount;
  let globex: WebhookAccount;

  beforeAll(async () => {
    backend = await createTestBackend();
    receiver = await Receiver.start();
    hangingReceiver(receiver);
    instance = await startWebhookInstance(backend, {
      // Ten slots (the default), two of them at most for one endpoint; a hanging attempt holds its slot
      // for the whole timeout.
      env: { PLAYBOOK_WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS), PLAYBOOK_WEBHOOK_CONCURRENCY: '10' },
    });
    acme = await WebhookAccount.of(instance, 'acme');
    globex = await WebhookAccount.of(instance, 'globex', 'eve');
  });
  afterAll(async () => {
    await instance?.close();
    await receiver?.close();
    await backend?.cleanup();
  });

  it("a dozen endpoints that never answer, with changes queued, and endpoint changes queuing more: another account's test delivery is attempted within seconds", async () => {
    const hanging: { id: string }[] = [];
    for (let i = 0; i < 12; i++) hanging.push(await acme.endpoint(receiver.url(`/hang/${i}`)));
    // Ten changes queued to each of them (a Catalog and nine Resources), then a change of each
    // endpoint, each one more delivery to all twelve.
    await acme.publish('flood', 9);
    for (const { id } of hanging) {
      const patched = await instance.app.inject({
        method: 'PATCH',
        url: `/v3/identity/webhook-endpoints/${id}`,
        headers: acme.user,
        payload: { description: 'still there' },
      });
      expect(patched.statusCode).toBe(200);
    }
    // Alone with deliveries due, the account uses every slot.
    await waitFor('every slot held by a hanging attempt', () => receiver.received.length >= 10);
    const other = await globex.endpoint(receiver.url('/other'), ['resource.created']);
    const asked = Date.now();
    const test = await globex.test(other.id);
    // A slot frees when a hanging attempt times out; the other account has it then.
    await waitFor(
      'the test delivery',
      () => receiver.at('/other').some((r) => r.id === test.eventId),
      2 * TIMEOUT_MS,
    );
    expect(Date.now() - asked).toBeLessThan(2 * TIMEOUT_MS);
    await waitFor('its attempt listed', async () => (await globex.attempts(other.id)).length === 1);
    expect((await globex.attempts(other.id))[0]).toMatchObject({
      type: 'webhook.test',
      outcome: 'succeeded',
    });
    for (const { id } of hanging) await acme.remove(id);
  }, 60_000);

  it('while another account has deliveries waiting, one account holds at most half the slots', async () => {
    const acmeHooks: { id: string }[] = [];
    const globexHooks: { id: string }[] = [];
    for (let i = 0; i < 6; i++) {
      acmeHooks.push(await acme.endpoint(receiver.url(`/hang/a${i}`), ['resource.created']));
      globexHooks.push(await globex.endpoint(receiver.url(`/hang/g${i}`), ['resource.created']));
    }
    // Both backlogs due at once: every claim shares the slots between the two.
    await acme.publish('a-backlog', 8);
    await globex.publish('g-backlog', 8);
    const listed = async (hooks: { id: string }[], account: WebhookAccount) =>
      (await Promise.all(hooks.map(({ id }) => account.attempts(id)))).flat();
    let made: { acme: ListedAttempt[]; globex: ListedAttempt[] } = { acme: [], globex: [] };
    await waitFor(
      'three rounds of attempts of each',
      async () => {
        made = { acme: await listed(acmeHooks, acme), globex: await listed(globexHooks, globex) };
        return made.acme.length >= 15 && made.globex.length >= 15;
      },
      8 * TIMEOUT_MS,
    );
    // The attempts that ran while the other account's hanging ones were running too.
    const startedBy = (attempts: readonly ListedAttempt[]) =>
      Math.min(...attempts.map((a) => Date.parse(a.at)));
    const from = Math.max(startedBy(made.acme), startedBy(made.globex));
    const during = (attempts: readonly ListedAttempt[]) => attempts.filter((a) => Date.parse(a.at) >= from);
    expect(mostAtOnce(spans(during(made.acme)))).toBeLessThanOrEqual(5);
    expect(mostAtOnce(spans(during(made.globex)))).toBeLessThanOrEqual(5);
    expect(mostAtOnce(spans([...made.acme, ...made.globex]))).toBeLessThanOrEqual(10);
    for (const attempt of [...made.acme, ...made.globex]) expect(attempt.reason).toBe('timeout');
    for (const { id } of acmeHooks) await acme.remove(id);
    for (const { id } of globexHooks) await globex.remove(id);
  }, 60_000);
});

describe('an endpoint that keeps timing out is tried one attempt at a time with a 2 s timeout, until a 2xx (D28)', () => {
  let backend: TestBackend;
  let receiver: Receiver;
  /** The instances started: each is closed once. */
  const instances = new Set<WebhookInstance>();
  let stuck = true;
  const env = {
    PLAYBOOK_WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
    PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY: '2',
    // Enough retries that the endpoint's deliveries keep it busy while the test looks.
    PLAYBOOK_WEBHOOK_RETRY_SCHEDULE: Array(12).fill('100ms').join(','),
  };

  beforeAll(async () => {
    backend = await createTestBackend();
    receiver = await Receiver.start();
    receiver.behaviour = () => (stuck ? { hold: true } : { status: 204 });
  });
  afterAll(async () => {
    for (const instance of instances) await instance.close();
    await receiver?.close();
    await backend?.cleanup();
  });

  const start = async () => {
    const instance = await startWebhookInstance(backend, { env });
    instances.add(instance);
    return instance;
  };
  const close = async (instance: WebhookInstance) => {
    instances.delete(instance);
    await instance.close();
  };

  const endpointRow = (endpointId: string) =>
    backend.databases.primary
      .selectFrom('webhook_endpoints')
      .select(['timeouts_in_a_row', 'pending_deliveries'])
      .where('id', '=', endpointId)
      .executeTakeFirstOrThrow();
  const timeoutsInARow = async (endpointId: string) => (await endpointRow(endpointId)).timeouts_in_a_row;

  it('three timeouts in a row put it to one attempt at a time of 2 s, on every instance; a 2xx restores both', async () => {
    const first = await start();
    const acme = await WebhookAccount.of(first, 'acme');
    const hook = await acme.endpoint(receiver.url('/stuck'), ['resource.created']);
    await acme.publish('stuck', 6);
    const slow = (attempts: readonly ListedAttempt[]) =>
      attempts.filter((a) => a.error === 'no answer within 2 s');
    await waitFor(
      'three attempts of 2 s',
      async () => slow(await acme.attempts(hook.id)).length >= 3,
      30_000,
    );
    const made = await acme.attempts(hook.id);
    // Two at a time, each waiting out the whole timeout, until the third timeout in a row.
    const full = made.filter((a) => a.error === `no answer within ${TIMEOUT_MS / 1000} s`);
    expect(full.length).toBeGreaterThanOrEqual(3);
    expect(mostAtOnce(spans(full))).toBe(2);
    for (const attempt of made) expect(attempt).toMatchObject({ outcome: 'failed', reason: 'timeout' });
    // Then one at a time, each given up after 2 s.
    const lastFull = Math.max(...spans(full).map(([, end]) => end));
    const after = slow(made).filter((a) => Date.parse(a.at) >= lastFull);
    expect(after.length).toBeGreaterThanOrEqual(3);
    expect(mostAtOnce(spans(after))).toBe(1);
    for (const attempt of after) {
      expect(attempt.durationMs).toBeGreaterThanOrEqual(1900);
      expect(attempt.durationMs).toBeLessThan(TIMEOUT_MS);
    }
    expect(await timeoutsInARow(hook.id)).toBeGreaterThanOrEqual(3);

    // Another instance reads the run from the endpoint's row: its attempts are of 2 s too.
    await close(first);
    const second = await start();
    const again = await WebhookAccount.of(second, 'acme');
    const byTheSecond = () =>
      second.logs.filter((line) => line.msg === 'webhook attempt' && line.webhookEndpoint === hook.id);
    await waitFor('an attempt of the second instance', () => byTheSecond().length >= 1, 4 * TIMEOUT_MS);
    expect(byTheSecond()[0]).toMatchObject({ error: 'no answer within 2 s', outcome: 'retrying' });

    // A 2xx restores the timeout and the share: the next attempts that hang wait out the whole
    // timeout, two at a time.
    stuck = false;
    await waitFor(
      'a success',
      () => byTheSecond().some((line) => line.outcome === 'succeeded'),
      4 * TIMEOUT_MS,
    );
    await waitFor('the run ended', async () => (await timeoutsInARow(hook.id)) === 0);
    await waitFor(
      'every delivery made',
      async () => (await endpointRow(hook.id)).pending_deliveries === 0,
      4 * TIMEOUT_MS,
    );
    stuck = true;
    const restored = Date.now();
    await again.publish('stuck-again', 2);
    const hungAgain = async () =>
      (await again.attempts(hook.id)).filter(
        (a) => Date.parse(a.at) >= restored && a.error === `no answer within ${TIMEOUT_MS / 1000} s`,
      );
    await waitFor(
      'two attempts of the whole timeout',
      async () => (await hungAgain()).length >= 2,
      4 * TIMEOUT_MS,
    );
    expect(mostAtOnce(spans(await hungAgain()))).toBe(2);
  }, 90_000);
});
