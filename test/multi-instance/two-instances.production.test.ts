import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/program.js';
import { closeRedis, createRedisClient } from '../../src/redis/redis-connection.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenAccount } from '../helpers/fixtures.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { bearer, type Instance, startInstance, storeKey } from './support.js';

/**
 * Issue 4, "How it is checked": two instances of the service, each composed as its own process would
 * be, over one PostgreSQL database and one Redis. A key revoked through one is refused by the other
 * within a second (D8); rate limits and failed-authentication limits are counted once for both (D10).
 */

const CATALOGS = '/v3/playbook/catalogs';
const POLL_EVERY_MS = 10;

class Capture extends Writable {
  text = '';
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.text += chunk.toString('utf8');
    done();
  }
}

function requireRedis(backend: TestBackend): string {
  if (!backend.redisUrl) throw new Error('the production backend has no Redis');
  return backend.redisUrl;
}

async function bothReady(instances: readonly Instance[]) {
  for (const instance of instances) {
    await waitFor(`${instance.name}'s Redis connections`, () => instance.redisReady());
  }
}

describe('two instances over one PostgreSQL and one Redis', () => {
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  describe('a revocation through one instance (D8)', () => {
    let a: Instance;
    let b: Instance;
    /**
     * B's clock, held still while a test says so. A cached key then never ages on B, so B's
     * one-second storage re-read never comes due: only the Redis announcement can make B refuse.
     */
    let heldAt: number | undefined;

    beforeAll(async () => {
      const redisUrl = requireRedis(backend);
      a = await startInstance('A', backend, { redisUrl });
      b = await startInstance('B', backend, {
        redisUrl,
        identity: { now: () => heldAt ?? Date.now() },
      });
      await bothReady([a, b]);
    });
    afterAll(async () => {
      heldAt = undefined;
      await a?.close();
      await b?.close();
    });

    const read = (instance: Instance, key: string) =>
      instance.app.inject({ url: CATALOGS, headers: { 'x-api-key': key } });

    it('is refused by the other instance within a second, through the bus alone', async () => {
      const authorization = await bearer(a, 'ada', ['acme']);
      const created = await a.app.inject({
        method: 'POST',
        url: '/v3/identity/api-keys',
        headers: { authorization },
        payload: { name: 'deploy bot', accountId: 'acme', scopes: ['playbook:read'] },
      });
      expect(created.statusCode).toBe(201);
      const { id, key } = created.json() as { id: string; key: string };

      heldAt = Date.now();
      expect((await read(b, key)).statusCode).toBe(200);
      expect((await read(a, key)).statusCode).toBe(200);
      // B has the key cached: further uses read nothing from storage.
      const cachedLookups = b.lookups.count;
      for (let i = 0; i < 5; i++) expect((await read(b, key)).statusCode).toBe(200);
      expect(b.lookups.count).toBe(cachedLookups);

      const revoked = await a.app.inject({
        method: 'DELETE',
        url: `/v3/identity/api-keys/${id}`,
        headers: { authorization },
      });
      expect(revoked.statusCode).toBe(204);
      const revokedAt = performance.now();
      // The instance that revoked refuses at once.
      expect((await read(a, key)).statusCode).toBe(401);

      let refusedAfterMs: number | undefined;
      while (performance.now() - revokedAt < 1000) {
        const answer = await read(b, key);
        if (answer.statusCode === 401) {
          refusedAfterMs = performance.now() - revokedAt;
          expect(answer.json()).toMatchObject({ code: 'unauthenticated' });
          break;
        }
        expect(answer.statusCode).toBe(200);
        await sleep(POLL_EVERY_MS);
      }
      expect(refusedAfterMs, 'B still accepted the revoked key a second later').toBeDefined();
      expect(refusedAfterMs).toBeLessThan(1000);
      // Marked revoked by the announcement and refused from memory: no storage read, so that the
      // refusal holds through a database outage too (D31).
      expect(b.lookups.count).toBe(cachedLookups);
      expect((await read(b, key)).statusCode).toBe(401);
    });

    it('works the other way round, for a key revoked by an operator through B', async () => {
      heldAt = undefined;
      const { id, key } = await storeKey(a, 'acme');
      expect((await read(a, key)).statusCode).toBe(200);
      expect((await read(b, key)).statusCode).toBe(200);
      // `playbook keys revoke` goes through the same key service as the operator's instance.
      expect(await b.services.identity.keys.revoke(id)).toBe('revoked');
      const revokedAt = performance.now();
      await waitFor('A refusing the key', async () => (await read(a, key)).statusCode === 401, 1000);
      expect(performance.now() - revokedAt).toBeLessThan(1000);
    });

    it('announces a revocation made by `playbook keys revoke`, a process that has only just connected', async () => {
      const redisUrl = requireRedis(backend);
      const { id } = await storeKey(a, 'acme');
      const listener = createRedisClient(redisUrl, { connectionName: 'playbook-test' });
      try {
        await waitFor('the listening connection', async () => listener.status === 'ready');
        await listener.subscribe('playbook:revocations');
        const heard = new Promise<void>((resolve) => {
          listener.on('message', (_channel: string, message: string) => {
            if (message === id) resolve();
          });
        });
        const stdout = new Capture();
        const stderr = new Capture();
        const env = { ...backend.env, PLAYBOOK_REDIS_URL: redisUrl, LOG_LEVEL: 'silent' };
        const code = await main(['node', 'playbook', 'keys', 'revoke', id], env, { stdout, stderr });
        expect({ code, stdout: stdout.text, stderr: stderr.text }).toEqual({
          code: 0,
          stdout: `key ${id} revoked\n`,
          stderr: '',
        });
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          heard,
          new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error('no announcement on the channel')), 1000);
          }),
        ]).finally(() => clearTimeout(timer));
      } finally {
        await closeRedis(listener);
      }
    });
  });

  describe('limits counted once for both instances (D10)', () => {
    let a: Instance;
    let b: Instance;
    const LIMIT = 4;
    const FAILURE_LIMIT = 3;

    beforeAll(async () => {
      const redisUrl = requireRedis(backend);
      const env = {
        PLAYBOOK_RATE_LIMIT_MAX: String(LIMIT),
        PLAYBOOK_RATE_LIMIT_WINDOW_MS: '60000',
        PLAYBOOK_AUTH_FAILURE_MAX: String(FAILURE_LIMIT),
      };
      a = await startInstance('A', backend, { redisUrl, env });
      b = await startInstance('B', backend, { redisUrl, env });
      await bothReady([a, b]);
    });
    afterAll(async () => {
      await a?.close();
      await b?.close();
    });

    function expectHeaders(
      response: { headers: Record<string, unknown> },
      limit: number,
      remaining: number,
    ): void {
      expect(response.headers['ratelimit-limit']).toBe(String(limit));
      expect(response.headers['ratelimit-remaining']).toBe(String(remaining));
      const reset = Number(response.headers['ratelimit-reset']);
      expect(reset).toBeGreaterThan(0);
      expect(reset).toBeLessThanOrEqual(60);
    }

    it('lets N requests split across A and B through, then refuses the next on either', async () => {
      const { key } = await storeKey(a, 'acme');
      const headers = { 'x-api-key': key };
      const order = [a, b, a, b];
      for (const [i, instance] of order.entries()) {
        const response = await instance.app.inject({ url: CATALOGS, headers, remoteAddress: '10.20.0.1' });
        expect(response.statusCode, `request ${i + 1} on ${instance.name}`).toBe(200);
        expectHeaders(response, LIMIT, LIMIT - i - 1);
      }
      for (const instance of [a, b]) {
        const limited = await instance.app.inject({ url: CATALOGS, headers, remoteAddress: '10.20.0.2' });
        expect(limited.statusCode, `over the limit on ${instance.name}`).toBe(429);
        expect(limited.headers['content-type']).toMatch(/^application\/problem\+json/);
        expect(limited.json()).toMatchObject({ status: 429, code: 'rate_limited' });
        expectHeaders(limited, LIMIT, 0);
        const retryAfter = Number(limited.headers['retry-after']);
        expect(retryAfter).toBeGreaterThan(0);
        expect(retryAfter).toBeLessThanOrEqual(60);
      }
      // Another key has a budget of its own, on both instances.
      const other = { 'x-api-key': (await storeKey(b, 'acme')).key };
      // (From an address of its own: the counts in Redis outlive the instances of the tests before.)
      for (const instance of [a, b]) {
        const response = await instance.app.inject({
          url: CATALOGS,
          headers: other,
          remoteAddress: '10.20.0.3',
        });
        expect(response.statusCode).toBe(200);
      }
    });

    it('counts failed authentications from one address once for both', async () => {
      const address = '10.20.1.1';
      const good = { 'x-api-key': (await storeKey(a, 'acme')).key };
      const bad = { 'x-api-key': 'svc_sk_test_notakey' };
      for (const [i, instance] of [a, b, a].entries()) {
        const refused = await instance.app.inject({ url: CATALOGS, headers: bad, remoteAddress: address });
        expect(refused.statusCode, `failure ${i + 1} on ${instance.name}`).toBe(401);
        expectHeaders(refused, FAILURE_LIMIT, FAILURE_LIMIT - i - 1);
      }
      for (const instance of [b, a]) {
        // The next failure from that address is turned away on either instance (D10)...
        const blocked = await instance.app.inject({ url: CATALOGS, headers: bad, remoteAddress: address });
        expect(blocked.statusCode, `blocked on ${instance.name}`).toBe(429);
        expect(Number(blocked.headers['retry-after'])).toBeGreaterThan(0);
        expectHeaders(blocked, FAILURE_LIMIT, 0);
        // ...while a good key from it is served.
        const served = await instance.app.inject({ url: CATALOGS, headers: good, remoteAddress: address });
        expect(served.statusCode, `served on ${instance.name}`).toBe(200);
      }
      // Another address is unaffected.
      expect(
        (await b.app.inject({ url: CATALOGS, headers: good, remoteAddress: '10.20.1.2' })).statusCode,
      ).toBe(200);
    });

    it('shows Redis in the /readyz details of each instance', async () => {
      for (const [i, instance] of [a, b].entries()) {
        const ready = await instance.app.inject({ url: '/readyz', remoteAddress: `10.20.2.${i}` });
        expect(ready.statusCode).toBe(200);
        expect(ready.json()).toEqual({
          status: 'ready',
          checks: { database: 'ok', contentStore: 'ok', redis: 'ok' },
        });
      }
    });
  });
});
