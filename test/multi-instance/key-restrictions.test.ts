import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenAccount, givenCatalog } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/wait.js';
import { bearer, type Instance, startInstance, WITHIN_MS } from './support.js';

/**
 * D32 on a second instance: a key's restrictions changed through one instance apply on the other as
 * fast as a revocation (D8, D22), through the change log where instances share only the database,
 * through Redis where it is configured; a key's own rate is counted once for every instance that
 * shares a Redis.
 */

const HANDBOOK = '/v3/playbook/catalogs/org/handbook';
const RUNBOOKS = '/v3/playbook/catalogs/org/runbooks';

/** Redis runs in the production project alone. */
const withRedis = inject('playbookServers') !== undefined;
const variants = [
  { name: 'sharing the database alone', redis: false },
  ...(withRedis ? [{ name: 'through Redis', redis: true }] : []),
];

describe('restrictions changed through one instance (D32)', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
    await givenCatalog(backend.databases.primary, { accountId: 'acme', slug: 'handbook' });
    await givenCatalog(backend.databases.primary, { accountId: 'acme', slug: 'runbooks' });
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  for (const variant of variants) {
    describe(variant.name, () => {
      let a: Instance;
      let b: Instance;
      let authorization: string;
      /**
       * B's clock, held still: a key it holds never ages, so its one-second storage read never comes
       * due, and only what the change log (or Redis) says can make B apply a change.
       */
      let heldAt: number | undefined;

      beforeAll(async () => {
        const redisUrl = variant.redis ? backend.redisUrl : undefined;
        a = await startInstance('A', backend, redisUrl ? { redisUrl } : {});
        b = await startInstance('B', backend, {
          ...(redisUrl ? { redisUrl } : {}),
          identity: { now: () => heldAt ?? Date.now() },
          // Through Redis, the change log is read too rarely to be what carries the change.
          ...(redisUrl ? { changePollMs: 60_000 } : {}),
        });
        if (redisUrl) {
          await waitFor(
            'both Redis connections',
            async () => (await a.redisReady()) && (await b.redisReady()),
          );
        }
        authorization = await bearer(a, 'ada', ['acme']);
      });
      afterAll(async () => {
        heldAt = undefined;
        await a?.close();
        await b?.close();
      });

      const create = async (restrictions: Record<string, unknown>) => {
        const response = await a.app.inject({
          method: 'POST',
          url: '/v3/identity/api-keys',
          headers: { authorization },
          payload: { name: 'ci', accountId: 'acme', scopes: ['playbook:read'], restrictions },
        });
        expect(response.statusCode, response.body).toBe(201);
        return response.json() as { id: string; key: string };
      };
      const change = async (keyId: string, restrictions: Record<string, unknown> | null) => {
        const response = await a.app.inject({
          method: 'PATCH',
          url: `/v3/identity/api-keys/${keyId}`,
          headers: { authorization },
          payload: { restrictions },
        });
        expect(response.statusCode, response.body).toBe(200);
        return performance.now();
      };
      const status = async (instance: Instance, key: string, url: string) =>
        (await instance.app.inject({ url, headers: { 'x-api-key': key } })).statusCode;

      it('a change of its Catalogs, then of its addresses, applies on the other within a second', async () => {
        const { id, key } = await create({ catalogs: ['org/runbooks'] });
        heldAt = Date.now();
        expect(await status(b, key, RUNBOOKS)).toBe(200);
        expect(await status(b, key, HANDBOOK)).toBe(404);

        let changedAt = await change(id, { catalogs: ['org/handbook'] });
        await waitFor(
          'B reading the other Catalog',
          async () => (await status(b, key, HANDBOOK)) === 200,
          WITHIN_MS,
        );
        expect(performance.now() - changedAt).toBeLessThan(WITHIN_MS);
        expect(await status(b, key, RUNBOOKS)).toBe(404);

        changedAt = await change(id, { allowedIps: ['10.0.0.0/8'] });
        await waitFor(
          'B refusing the address',
          async () => (await status(b, key, HANDBOOK)) === 403,
          WITHIN_MS,
        );
        expect(performance.now() - changedAt).toBeLessThan(WITHIN_MS);

        changedAt = await change(id, null);
        await waitFor(
          'B lifting every restriction',
          async () => (await status(b, key, RUNBOOKS)) === 200,
          WITHIN_MS,
        );
        expect(await status(b, key, HANDBOOK)).toBe(200);
      });

      it('a roll through one instance hands the restrictions to a successor the other enforces', async () => {
        heldAt = undefined;
        const { id } = await create({ catalogs: ['org/runbooks'] });
        const rolled = await a.app.inject({
          method: 'POST',
          url: `/v3/identity/api-keys/${id}/roll`,
          headers: { authorization },
        });
        expect(rolled.statusCode, rolled.body).toBe(201);
        const successor = rolled.json().key as string;
        expect(await status(b, successor, RUNBOOKS)).toBe(200);
        expect(await status(b, successor, HANDBOOK)).toBe(404);
      });

      it.runIf(variant.redis)("counts a key's own rate once for both instances", async () => {
        heldAt = undefined;
        const { key } = await create({ rateLimit: { limit: 4, windowSeconds: 60 } });
        const seen = [];
        for (const instance of [a, b, a, b]) seen.push(await status(instance, key, RUNBOOKS));
        expect(seen).toEqual([200, 200, 200, 200]);
        const refused = await b.app.inject({ url: RUNBOOKS, headers: { 'x-api-key': key } });
        expect(refused.statusCode).toBe(429);
        expect(refused.headers['ratelimit-limit']).toBe('4');
        expect(await status(a, key, RUNBOOKS)).toBe(429);
      });
    });
  }
});
