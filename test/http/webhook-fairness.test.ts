import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { waitFor } from '../helpers/wait.js';
import { Receiver, startWebhookInstance, userHeaders, type WebhookInstance } from '../helpers/webhooks.js';

/**
 * D28: an endpoint that answers slowly holds its share of an instance's delivery slots
 * (PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY), never all of them, so that the deliveries of the other
 * endpoints keep flowing while its attempts wait for their timeout; an endpoint that answers quickly
 * may take any free slot.
 */

const BASE = '/v3/identity/webhook-endpoints';
const TIMEOUT_MS = 4000;

interface Attempt {
  at: string;
  durationMs: number;
  outcome: string;
  error?: string;
}

/** The most intervals `[start, end)` that overlap at one moment. */
function mostAtOnce(intervals: readonly (readonly [number, number])[]): number {
  const edges = intervals.flatMap(([start, end]) => [
    [start, 1],
    [end, -1],
  ]);
  // An end and a start at the same moment do not overlap.
  edges.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let open = 0;
  let most = 0;
  for (const [, step] of edges) {
    open += step!;
    most = Math.max(most, open);
  }
  return most;
}

/** An instance with `env`, a receiver, and an account's user and writer, with what the tests do. */
class Fairness {
  private constructor(
    readonly backend: TestBackend,
    readonly instance: WebhookInstance,
    readonly receiver: Receiver,
    private readonly user: Record<string, string>,
    private readonly writer: Record<string, string>,
  ) {}

  static async start(env: Record<string, string>): Promise<Fairness> {
    const backend = await createTestBackend();
    const instance = await startWebhookInstance(backend, { env });
    const receiver = await Receiver.start();
    const user = await userHeaders(instance, ['acme']);
    const key = await instance.services.identity.keys.createFor(
      { subject: 'ada', accounts: ['acme'] },
      { name: 'ci', accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] },
    );
    return new Fairness(backend, instance, receiver, user, { 'x-api-key': key.key });
  }

  async close(): Promise<void> {
    await this.instance.close();
    await this.receiver.close();
    await this.backend.cleanup();
  }

  async endpoint(path: string, events = ['resource.created']): Promise<{ id: string }> {
    const created = await this.instance.app.inject({
      method: 'POST',
      url: BASE,
      headers: this.user,
      payload: { accountId: 'acme', url: this.receiver.url(path), events },
    });
    expect(created.statusCode, created.body).toBe(201);
    return created.json();
  }

  async remove(endpointId: string): Promise<void> {
    const deleted = await this.instance.app.inject({
      method: 'DELETE',
      url: `${BASE}/${endpointId}`,
      headers: this.user,
    });
    expect(deleted.statusCode).toBe(204);
  }

  /** A Catalog of `count` Resources: one resource.created change each. */
  async publish(slug: string, count: number): Promise<void> {
    const answer = await this.instance.app.inject({
      method: 'PUT',
      url: `/v3/playbook/catalogs/org/${slug}`,
      headers: this.writer,
      payload: {
        name: slug,
        version: '1',
        resources: Array.from({ length: count }, (_, i) => publishedResource(`${slug}-${i}`)),
      },
    });
    expect(answer.statusCode, answer.body).toBe(201);
  }

  async attempts(endpointId: string): Promise<Attempt[]> {
    const answer = await this.instance.app.inject({
      url: `${BASE}/${endpointId}/deliveries?pageSize=100`,
      headers: this.user,
    });
    expect(answer.statusCode, answer.body).toBe(200);
    return answer.json().data;
  }
}

const spans = (made: readonly Attempt[]) =>
  made.map((a) => [Date.parse(a.at), Date.parse(a.at) + a.durationMs] as const);

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
