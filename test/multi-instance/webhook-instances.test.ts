import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { freePort } from '../helpers/servers.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { Receiver, TEST_WEBHOOK_ENV } from '../helpers/webhooks.js';

/**
 * D28 with several instances over one database: each delivery is attempted by one instance at a time
 * (a lease), so two instances deliver each event once; an instance killed while an endpoint holds its
 * request leaves a lease that lapses, and the delivery is made after a restart.
 */

const ROOT = path.resolve(import.meta.dirname, '../..');
const CLI = path.join(ROOT, 'dist/cli/main.js');
const BASE = '/v3/identity/webhook-endpoints';

/** `playbook serve` as a process of its own on `backend`, its log lines kept; resolves once ready. */
async function serve(
  backend: TestBackend,
  port: number,
  children: ChildProcess[],
  logs: string[] = [],
): Promise<ChildProcess> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', String(port)], {
    env: { ...process.env, ...backend.env, ...TEST_WEBHOOK_ENV, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let rest = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    const lines = (rest + chunk.toString('utf8')).split('\n');
    rest = lines.pop() ?? '';
    logs.push(...lines);
  });
  child.stderr!.resume();
  await waitFor(
    'the instance ready',
    async () => {
      if (child.exitCode !== null) throw new Error(`serve exited with ${child.exitCode}`);
      return fetch(`http://127.0.0.1:${port}/readyz`).then(
        (answer) => answer.ok,
        () => false,
      );
    },
    30_000,
  );
  return child;
}

/** What an instance logged of its webhook attempts. */
function attemptLines(logs: readonly string[], endpointId: string): { event: string; leaseLost?: boolean }[] {
  return logs
    .filter((line) => line.includes('"webhook attempt"'))
    .map((line) => JSON.parse(line) as { webhookEndpoint: string; event: string; leaseLost?: boolean })
    .filter((line) => line.webhookEndpoint === endpointId);
}

/**
 * A describe block's parts: one database, an identity on it, a receiver, and the instances its tests
 * start (killed after the block). Read them inside tests: they are set in `beforeAll`.
 */
function instancesOverOneDatabase() {
  const parts = {
    backend: undefined as unknown as TestBackend,
    identity: undefined as unknown as TestIdentity,
    receiver: undefined as unknown as Receiver,
    children: [] as ChildProcess[],
  };
  beforeAll(async () => {
    parts.backend = await createTestBackend();
    parts.identity = createTestIdentity(parts.backend);
    parts.receiver = await Receiver.start();
  });
  afterAll(async () => {
    for (const child of parts.children) if (child.exitCode === null) child.kill('SIGKILL');
    await parts.identity?.close();
    await parts.receiver?.close();
    await parts.backend?.cleanup();
  });
  return parts;
}

describe('two instances deliver each event once (D28)', () => {
  const on = instancesOverOneDatabase();

  it('40 writes through two instances (two processes): every event received exactly once, no duplicate (no lease lapsed)', async () => {
    // The receiver takes a little time, so that both instances have deliveries in flight at once.
    on.receiver.behaviour = () => ({ status: 200, delayMs: 20 });
    const [portA, portB] = [await freePort(), await freePort()];
    const logsA: string[] = [];
    const logsB: string[] = [];
    await serve(on.backend, portA, on.children, logsA);
    await serve(on.backend, portB, on.children, logsB);
    const bases = [`http://127.0.0.1:${portA}`, `http://127.0.0.1:${portB}`];
    const token = await on.identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
    const json = { ...token, 'content-type': 'application/json' };
    const created = await fetch(`${bases[0]}${BASE}`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({
        accountId: 'acme',
        url: on.receiver.url('/once'),
        events: ['resource.created', 'resource.version_published'],
      }),
    });
    expect(created.status).toBe(201);
    const endpoint = (await created.json()) as { id: string };
    const key = await on.identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] });
    const writer = { 'x-api-key': key.key, 'content-type': 'application/json' };
    const first = await fetch(`${bases[0]}/v3/playbook/catalogs/org/shared`, {
      method: 'PUT',
      headers: writer,
      body: JSON.stringify({ name: 'Shared', version: '1', resources: [publishedResource('r0')] }),
    });
    expect(first.status).toBe(201);
    // One write after another, each through the other instance: both learn of every change.
    for (let i = 1; i <= 40; i++) {
      const { slug: _slug, ...body } = publishedResource(`r${i}`);
      const answer = await fetch(`${bases[i % 2]}/v3/playbook/catalogs/org/shared/resources/r${i}`, {
        method: 'PUT',
        headers: writer,
        body: JSON.stringify(body),
      });
      expect(answer.status).toBe(201);
    }
    await waitFor(
      '41 events received',
      () => new Set(on.receiver.at('/once').map((r) => r.id)).size === 41,
      30_000,
    );
    // Whatever is still in flight finishes; nothing more may arrive.
    await waitFor('nothing pending', async () => {
      const pending = await on.backend.databases.primary
        .selectFrom('webhook_deliveries')
        .select('id')
        .where('status', '=', 'pending')
        .execute();
      return pending.length === 0;
    });
    await sleep(500);
    const received = on.receiver.at('/once');
    const duplicates = received.length - new Set(received.map((r) => r.id)).size;
    expect(duplicates).toBe(0);
    expect(received).toHaveLength(41);
    // Each event was attempted by one instance, once: the attempts both logged add up to the events.
    const byA = attemptLines(logsA, endpoint.id);
    const byB = attemptLines(logsB, endpoint.id);
    expect(byA.length + byB.length).toBe(41);
    expect(new Set([...byA, ...byB].map((line) => line.event)).size).toBe(41);
    for (const line of [...byA, ...byB]) expect(line.leaseLost).toBeUndefined();
    console.log(
      `deliveries made by instance A: ${byA.length}, by instance B: ${byB.length}; duplicates: ${duplicates}`,
    );
  }, 90_000);
});

describe('an instance killed mid-delivery (D28)', () => {
  const on = instancesOverOneDatabase();

  it('SIGKILL while the endpoint holds the request: after a restart the delivery is made, with the same webhook-id', async () => {
    // The first request of each event is held, never answered: the instance dies while it waits.
    on.receiver.behaviour = (_request, attempt) => (attempt === 1 ? { hold: true } : { status: 200 });
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const first = await serve(on.backend, port, on.children);
    const token = await on.identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
    const created = await fetch(`${base}${BASE}`, {
      method: 'POST',
      headers: { ...token, 'content-type': 'application/json' },
      body: JSON.stringify({
        accountId: 'acme',
        url: on.receiver.url('/killed'),
        events: ['webhook_endpoint.updated'],
      }),
    });
    expect(created.status).toBe(201);
    const endpoint = (await created.json()) as { id: string; secret: string };
    const patched = await fetch(`${base}${BASE}/${endpoint.id}`, {
      method: 'PATCH',
      headers: { ...token, 'content-type': 'application/json' },
      body: JSON.stringify({ description: 'the change delivered while its instance dies' }),
    });
    expect(patched.status).toBe(200);
    await waitFor('the held request', () => on.receiver.at('/killed').length === 1);
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    const killedAt = Date.now();

    await serve(on.backend, port, on.children);
    await waitFor('the delivery after the restart', () => on.receiver.at('/killed').length === 2, 20_000);
    const [held, made] = on.receiver.at('/killed');
    expect(made!.id).toBe(held!.id);
    expect(made!.body).toBe(held!.body);
    // Not before the killed instance's lease lapsed (twice the 1 s timeout and a second).
    expect(made!.at - killedAt).toBeGreaterThan(1000);
    // The attempt is recorded once the endpoint has answered, a moment after the receiver counted it.
    type Attempts = { data: { attempt: number; outcome: string; statusCode: number }[] };
    let list: Attempts = { data: [] };
    await waitFor('the attempt recorded', async () => {
      const attempts = await fetch(`${base}${BASE}/${endpoint.id}/deliveries`, { headers: token });
      list = (await attempts.json()) as Attempts;
      return list.data.length > 0;
    });
    // The killed instance never learned the outcome of its attempt, and recorded none: the delivery
    // ends with one that succeeded.
    expect(list.data).toHaveLength(1);
    expect(list.data[0]).toMatchObject({ outcome: 'succeeded', statusCode: 200 });
    await sleep(500);
    // Exactly one duplicate, the held request, and nothing more.
    expect(on.receiver.at('/killed')).toHaveLength(2);
  }, 90_000);
});
