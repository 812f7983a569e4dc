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
 * D28: an endpoint that answers slowly holds its share of an instance's delivery slots
 * (PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY), never all of them, so that the deliveries of the other
 * endpoints keep flowing while its attempts wait for their timeout; an endpoint that answers quickly
 * may take any free slot.
 */

const TIMEOUT_MS = 4000;

/** An instance with `env`, a receiver, and an account with what the tests do. */
class Fairness {
  private constructor(
    readonly backend: TestBackend,
    readonly instance: WebhookInstance,
    readonly receiver: Receiver,
    readonly acme: WebhookAccount,
  ) {}

  static async start(env: Record<string, string>): Promise<Fairness> {
    const backend = await createTestBackend();
    const instance = await startWebhookInstance(backend, { env });
    const receiver = await Receiver.start();
    return new Fairness(backend, instance, receiver, await WebhookAccount.of(instance, 'acme'));
  }

  async close(): Promise<void> {
    await this.instance.close();
    await this.receiver.close();
    await this.backend.cleanup();
  }

  endpoint(path: string, events = ['resource.created']): Promise<{ id: string }> {
    return this.acme.endpoint(this.receiver.url(path), events);
  }

  remove(endpointId: string): Promise<void> {
    return this.acme.remove(endpointId);
  }

  /** A Catalog of `count` Resources: one resource.created change each. */
  publish(slug: string, count: number): Promise<void> {
    return this.acme.publish(slug, count);
  }

  attempts(endpointId: string): Promise<ListedAttempt[]> {
    return this.acme.attempts(endpointId);
  }
}

describe('a slow endpoint holds its share of the delivery slots, never all of them (D28)', () => {
  let f: Fairness;

  beforeAll(async () => {
    f = await Fairness.start({
      // Four slots, two of them at most for an endpoint that has not shown it answers quickly.
      PLAYBOOK_WEBHOOK_CONCURRENCY: '4',
      PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY: '2',
      PLAYBOOK_WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
      // A timed-out attempt is not tried again while the test looks.
      PLAYBOOK_WEBHOOK_RETRY_SCHEDULE: '1h',
    });
    // The slow endpoint answers after 9 s, past the timeout; the fast one at once.
    f.receiver.behaviour = (request) =>
      request.path === '/slow' ? { status: 204, delayMs: 9000 } : { status: 204 };
  });
  afterAll(async () => {
    await f?.close();
  });

  it("a fast endpoint's deliveries arrive while the slow one's attempts wait for their timeout, which never hold more than two slots", async () => {
    const slow = await f.endpoint('/slow');
    // Eight deliveries due to the slow endpoint, older than anything of the fast one.
    await f.publish('backlog', 8);
    await waitFor('the slow endpoint holding its share', () => f.receiver.at('/slow').length === 2);
    const fast = await f.endpoint('/fast');
    // Six more to each: the slow endpoint's backlog is due before them all.
    await f.publish('flowing', 6);
    await waitFor('the fast deliveries', () => f.receiver.at('/fast').length === 6, TIMEOUT_MS);
    const lastFast = Math.max(...f.receiver.at('/fast').map((request) => request.at));
    const firstSlow = Math.min(...f.receiver.at('/slow').map((request) => request.at));
    // Every fast delivery arrived before the slow endpoint's first attempts gave up: those held two
    // slots, and the fast endpoint had the other two.
    expect(lastFast - firstSlow).toBeLessThan(TIMEOUT_MS);
    expect(f.receiver.at('/slow').filter((request) => request.at <= lastFast)).toHaveLength(2);
    await waitFor('the fast attempts kept', async () => (await f.attempts(fast.id)).length === 6);
    expect((await f.attempts(fast.id)).map((a) => a.outcome)).toEqual(Array(6).fill('succeeded'));

    // The slow endpoint's attempts time out two at a time, and the next two take their slots.
    await waitFor(
      'two rounds of slow attempts',
      async () => (await f.attempts(slow.id)).length >= 4,
      4 * TIMEOUT_MS,
    );
    const made = await f.attempts(slow.id);
    for (const attempt of made) {
      expect(attempt).toMatchObject({ outcome: 'failed', error: `no answer within ${TIMEOUT_MS / 1000} s` });
    }
    expect(mostAtOnce(spans(made))).toBe(2);

    // Deleted while two of its attempts wait: their outcome has no delivery left to be kept with, and
    // the deliveries of the others go on.
    await waitFor('slow attempts in flight', () => f.receiver.at('/slow').length > made.length);
    await f.remove(slow.id);
    await f.publish('after', 1);
    await waitFor('the next fast delivery', () => f.receiver.at('/fast').length === 7);
    await waitFor(
      'the slow attempts ended',
      () =>
        f.instance.logs.some(
          (line) => line.msg === 'webhook attempt' && line.webhookEndpoint === slow.id && line.leaseLost,
        ),
      2 * TIMEOUT_MS,
    );
    await f.publish('later', 1);
    await waitFor('a fast delivery after them', () => f.receiver.at('/fast').length === 8);
    expect(f.instance.logs.filter((line) => line.level >= 40 && /webhook/.test(line.msg))).toEqual([]);
  }, 40_000);
});

describe('an endpoint that answers quickly is not held to its share, one that fails is (D28)', () => {
  let f: Fairness;

  beforeAll(async () => {
    f = await Fairness.start({
      PLAYBOOK_WEBHOOK_CONCURRENCY: '4',
      PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY: '1',
      // A success within a quarter of the timeout (1 s here) is quick; the receiver answers in 150 ms.
      PLAYBOOK_WEBHOOK_TIMEOUT_MS: '4000',
    });
    f.receiver.behaviour = () => ({ status: 204, delayMs: 150 });
  });
  afterAll(async () => {
    await f?.close();
  });

  it('after an attempt succeeded within the time, a burst takes every free slot, not one', async () => {
    const steady = await f.endpoint('/steady');
    await f.publish('warm-up', 1);
    await waitFor('the first delivery', async () => (await f.attempts(steady.id)).length === 1);
    await f.publish('burst', 8);
    await waitFor('the burst', async () => (await f.attempts(steady.id)).length === 9);
    const made = await f.attempts(steady.id);
    expect(made.every((a) => a.outcome === 'succeeded')).toBe(true);
    expect(mostAtOnce(spans(made))).toBeGreaterThan(1);
    await f.remove(steady.id);
  }, 30_000);

  it('an endpoint that was quick and starts failing is held to its share from its first failure', async () => {
    const flaky = await f.endpoint('/flaky');
    await f.publish('flaky-warm-up', 1);
    await waitFor('the first delivery', async () => (await f.attempts(flaky.id)).length === 1);
    // From now on it fails as quickly as it succeeded: every attempt is retried by the schedule
    // (100, 200, 300 ms), then the delivery has failed.
    f.receiver.behaviour = () => ({ status: 500, delayMs: 150 });
    await f.publish('flaky-burst', 6);
    await waitFor(
      'every attempt of the burst',
      async () => (await f.attempts(flaky.id)).filter((a) => a.outcome !== 'succeeded').length === 6 * 4,
      20_000,
    );
    const failed = (await f.attempts(flaky.id)).filter((a) => a.outcome !== 'succeeded');
    expect(failed.every((a) => a.outcome === 'failed' && a.error === 'answered 500')).toBe(true);
    // The burst's first attempts were made while it was still quick (any free slot); once one of them
    // failed, its attempts went one at a time.
    const firstFailureEnded = Math.min(...spans(failed).map(([, end]) => end));
    const later = failed.filter((a) => Date.parse(a.at) >= firstFailureEnded);
    expect(later.length).toBeGreaterThanOrEqual(6 * 3);
    expect(mostAtOnce(spans(later))).toBe(1);
  }, 40_000);
});
