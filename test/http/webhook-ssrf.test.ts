import type dns from 'node:dns';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { guardedLookup, postWebhook } from '../../src/webhooks/webhook-request.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { Receiver, startWebhookInstance, userHeaders, type WebhookInstance } from '../helpers/webhooks.js';

/**
 * D28: no server-side request forgery. With the private-address guard on, a delivery to loopback,
 * link-local (the metadata service) or a name that resolves to a private address makes no connection
 * at all: a listener on that address sees none. The address is judged where the connection is made,
 * at each connection, so a name that changes its answer (DNS rebinding) is caught too.
 */

/** A resolver whose answers the test decides, as `dns.lookup` with `all: true` gives them. */
function resolverOf(answers: Record<string, string[] | (() => string[])>): typeof dns.lookup {
  return ((
    hostname: string,
    _options: unknown,
    callback: (e: Error | null, a?: dns.LookupAddress[]) => void,
  ) => {
    const entry = answers[hostname];
    const addresses = typeof entry === 'function' ? entry() : entry;
    if (!addresses) {
      callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }));
      return;
    }
    callback(
      null,
      addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })),
    );
  }) as unknown as typeof dns.lookup;
}

async function listenOn(host: string, port = 0): Promise<Receiver | undefined> {
  try {
    return await Receiver.start(host, port);
  } catch {
    return undefined; // no such address on this machine (IPv6 off)
  }
}

const GUARDED = { timeoutMs: 2000, allowHttp: true, allowPrivate: false };
const HEADERS = { 'content-type': 'application/json' };

describe('the connection guard of webhook attempts (D28)', () => {
  let v4: Receiver;
  let v6: Receiver | undefined;

  beforeAll(async () => {
    v4 = await Receiver.start('127.0.0.1');
    // The same port on ::1 where the machine has IPv6, so that `localhost` has a listener either way.
    v6 = await listenOn('::1', v4.port);
  });
  afterAll(async () => {
    await v4?.close();
    await v6?.close();
  });

  const connections = () => v4.connections + (v6?.connections ?? 0);

  it.each([
    ['127.0.0.1', () => `http://127.0.0.1:${v4.port}/hook`],
    ['localhost', () => `http://localhost:${v4.port}/hook`],
    ['[::1]', () => `http://[::1]:${v4.port}/hook`],
    ['::ffff:127.0.0.1', () => `http://[::ffff:127.0.0.1]:${v4.port}/hook`],
    ['::ffff:0:7f00:1 (IPv4-translated)', () => `http://[::ffff:0:7f00:1]:${v4.port}/hook`],
    ['::ffff:0:127.0.0.1 (IPv4-translated)', () => `http://[::ffff:0:127.0.0.1]:${v4.port}/hook`],
    ['64:ff9b::7f00:1 (NAT64)', () => `http://[64:ff9b::7f00:1]:${v4.port}/hook`],
    ['2130706433 (one decimal number)', () => `http://2130706433:${v4.port}/hook`],
    ['0177.0.0.1 (octal)', () => `http://0177.0.0.1:${v4.port}/hook`],
    ['0x7f.0.0.1 (hex)', () => `http://0x7f.0.0.1:${v4.port}/hook`],
    ['127.1 (short)', () => `http://127.1:${v4.port}/hook`],
    ['0.0.0.0', () => `http://0.0.0.0:${v4.port}/hook`],
  ])('%s: refused, and the listener sees no connection', async (_what, url) => {
    const before = connections();
    const result = await postWebhook(url(), HEADERS, '{}', GUARDED);
    expect(result).toMatchObject({ ok: false, failure: 'address' });
    expect(result.error).toMatch(/no public address/);
    await sleep(50);
    expect(connections()).toBe(before);
  });

  it.each([
    'http://169.254.169.254/latest/meta-data/',
    'http://2852039166/latest/meta-data/',
    'http://[::ffff:169.254.169.254]/latest/meta-data/',
    'http://[::ffff:0:a9fe:a9fe]/latest/meta-data/',
    'http://[fd00:ec2::254]/latest/meta-data/',
    'http://169.254.170.2/v2/credentials',
    'http://100.100.100.200/latest/meta-data/',
    'http://[fe80::1]/',
  ])('%s (cloud metadata, link-local): refused before any connection is tried', async (url) => {
    const result = await postWebhook(url, HEADERS, '{}', GUARDED);
    expect(result).toMatchObject({ ok: false, failure: 'address' });
    expect(result.durationMs).toBeLessThan(100);
  });

  it('a name that resolves to a private address gets no connection, and the address is not told', async () => {
    const before = connections();
    for (const answer of [
      ['127.0.0.1'],
      ['10.0.0.7'],
      ['::1'],
      ['169.254.169.254'],
      ['fd00::1', '127.0.0.1'],
      ['::ffff:0:7f00:1'],
      ['::ffff:0:a00:7'],
      ['::ffff:127.0.0.1'],
      ['fe80::1', '100.64.0.1'],
    ]) {
      const result = await postWebhook(`http://internal.example:${v4.port}/`, HEADERS, '{}', {
        ...GUARDED,
        resolve: resolverOf({ 'internal.example': answer }),
      });
      expect(result).toMatchObject({ ok: false, failure: 'address' });
      for (const address of answer) expect(result.error).not.toContain(address);
    }
    expect(connections()).toBe(before);
  });

  it('each connection resolves again and is judged again: a name that turns private (DNS rebinding) is refused', () => {
    let calls = 0;
    const rebinding = resolverOf({
      'rebind.example': () => (++calls === 1 ? ['93.184.216.34'] : ['127.0.0.1']),
    });
    const lookup = guardedLookup((address) => !address.startsWith('127.'), rebinding);
    const results: unknown[] = [];
    const done = (error: Error | null, address: unknown) => results.push(error ? error.message : address);
    lookup('rebind.example', { all: false }, done as never);
    lookup('rebind.example', { all: false }, done as never);
    expect(results[0]).toBe('93.184.216.34');
    expect(String(results[1])).toMatch(/no public address/);
    // Of several answers, only the allowed ones are handed to the connection.
    const mixed = guardedLookup(
      (address) => !address.startsWith('127.'),
      resolverOf({ 'mixed.example': ['127.0.0.1', '93.184.216.34'] }),
    );
    mixed('mixed.example', { all: true }, ((error: Error | null, addresses: dns.LookupAddress[]) => {
      expect(error).toBeNull();
      expect(addresses.map((a) => a.address)).toEqual(['93.184.216.34']);
    }) as never);
  });

  it('with private addresses allowed (development), the same request connects: the listener works', async () => {
    const before = v4.connections;
    const result = await postWebhook(`http://127.0.0.1:${v4.port}/hook`, HEADERS, '{}', {
      ...GUARDED,
      allowPrivate: true,
    });
    expect(result).toMatchObject({ ok: true, statusCode: 204 });
    expect(v4.connections).toBe(before + 1);
  });

  it('https only: an http URL is refused without a connection unless allowed', async () => {
    const before = connections();
    const result = await postWebhook(`http://127.0.0.1:${v4.port}/hook`, HEADERS, '{}', {
      ...GUARDED,
      allowHttp: false,
      allowPrivate: true,
    });
    expect(result).toMatchObject({ ok: false, failure: 'address' });
    expect(connections()).toBe(before);
  });

  it('reads at most 64 KiB of an answer, then drops the connection; the attempt has one deadline', async () => {
    let closed = false;
    const endless = http.createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(16 * 1024, 'x');
      const timer = setInterval(() => response.write(chunk), 5);
      response.on('close', () => {
        closed = true;
        clearInterval(timer);
      });
    });
    const silent = http.createServer(() => {});
    await new Promise<void>((resolve) => endless.listen(0, '127.0.0.1', resolve));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const port = (endless.address() as AddressInfo).port;
      const big = await postWebhook(`http://127.0.0.1:${port}/`, HEADERS, '{}', {
        ...GUARDED,
        allowPrivate: true,
      });
      expect(big).toMatchObject({ ok: true, statusCode: 200 });
      expect(big.durationMs).toBeLessThan(1500);
      await waitFor('the connection dropped', () => closed, 2000);
      const started = Date.now();
      const slow = await postWebhook(
        `http://127.0.0.1:${(silent.address() as AddressInfo).port}/`,
        HEADERS,
        '{}',
        {
          ...GUARDED,
          timeoutMs: 300,
          allowPrivate: true,
        },
      );
      expect(slow).toMatchObject({ ok: false, failure: 'timeout' });
      expect(Date.now() - started).toBeLessThan(1000);
    } finally {
      endless.closeAllConnections();
      silent.closeAllConnections();
      await new Promise((resolve) => endless.close(resolve));
      await new Promise((resolve) => silent.close(resolve));
    }
  });
});

describe('deliveries with the private-address guard on (D28)', () => {
  let backend: TestBackend;
  let registrar: WebhookInstance;
  let guarded: WebhookInstance;
  let receiver: Receiver;

  beforeAll(async () => {
    backend = await createTestBackend();
    receiver = await Receiver.start('127.0.0.1');
    // Endpoints registered while private addresses were allowed (a configuration since changed).
    registrar = await startWebhookInstance(backend, { deliver: false });
    guarded = await startWebhookInstance(backend, {
      env: { PLAYBOOK_WEBHOOK_ALLOW_PRIVATE: 'false', PLAYBOOK_WEBHOOK_RETRY_SCHEDULE: '5m' },
      resolve: resolverOf({
        'hooks.internal.example': ['127.0.0.1'],
        'hooks.translated.example': ['::ffff:0:7f00:1'],
      }),
    });
  });
  afterAll(async () => {
    await guarded?.close();
    await registrar?.close();
    await receiver?.close();
    await backend?.cleanup();
  });

  it('localhost, 127.0.0.1, [::1], an IPv4-translated loopback, 169.254.169.254, and names resolving to loopback: each attempt refused, no connection', async () => {
    const ada = await userHeaders(registrar, ['acme']);
    const urls = [
      `http://localhost:${receiver.port}/a`,
      `http://127.0.0.1:${receiver.port}/b`,
      `http://[::1]:${receiver.port}/c`,
      `http://[::ffff:0:7f00:1]:${receiver.port}/t`,
      'http://169.254.169.254/latest/meta-data/',
    ];
    const register = (on: WebhookInstance, url: string) =>
      on.app.inject({
        method: 'POST',
        url: '/v3/identity/webhook-endpoints',
        headers: ada,
        payload: { accountId: 'acme', url, events: ['*'] },
      });
    const ids: string[] = [];
    for (const url of urls) {
      const created = await register(registrar, url);
      expect(created.statusCode, created.body).toBe(201);
      ids.push(created.json().id);
    }
    // A public-looking name is taken when registered, and judged by what it resolves to when used.
    for (const host of ['hooks.internal.example', 'hooks.translated.example']) {
      const byName = await register(guarded, `http://${host}:${receiver.port}/d`);
      expect(byName.statusCode, byName.body).toBe(201);
      ids.push(byName.json().id);
    }
    // Registering them now is refused (all but the names, which only a connection can judge).
    for (const url of urls) expect((await register(guarded, url)).statusCode, url).toBe(400);

    for (const id of ids) {
      const test = await guarded.app.inject({
        method: 'POST',
        url: `/v3/identity/webhook-endpoints/${id}/test`,
        headers: ada,
      });
      expect(test.statusCode).toBe(202);
    }
    const attemptsOf = async (id: string) =>
      (
        await guarded.app.inject({ url: `/v3/identity/webhook-endpoints/${id}/deliveries`, headers: ada })
      ).json().data as {
        type: string;
        outcome: string;
        error?: string;
      }[];
    await waitFor(
      'every test attempted',
      async () => {
        for (const id of ids)
          if (!(await attemptsOf(id)).some((a) => a.type === 'webhook.test')) return false;
        return true;
      },
      30_000,
    );
    for (const id of ids) {
      const test = (await attemptsOf(id)).find((a) => a.type === 'webhook.test')!;
      expect(test.outcome).toBe('failed');
      expect(test.error).toMatch(/no public address/);
    }
    expect(receiver.connections).toBe(0);
    expect(receiver.received).toEqual([]);
    const refusals = await guarded.services.metrics.registry.getSingleMetricAsString(
      'playbook_webhook_attempts_total',
    );
    const count = Number(/outcome="failed",reason="address"\} (\d+)/.exec(refusals)?.[1]);
    expect(count).toBeGreaterThanOrEqual(ids.length);
    // Each waits five minutes for its next attempt: the oldest delivery not yet made is counted.
    const backlog = await guarded.services.metrics.registry.getSingleMetricAsString(
      'playbook_webhook_oldest_pending_seconds',
    );
    expect(Number(/^playbook_webhook_oldest_pending_seconds (\S+)$/m.exec(backlog)?.[1])).toBeGreaterThan(0);
  }, 60_000);
});
