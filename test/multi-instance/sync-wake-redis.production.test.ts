import { afterAll, beforeAll, describe, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenAccount } from '../helpers/fixtures.js';
import type { Instance } from './support.js';
import { expectRevokedAcross, expectWokenAcross, withInstances } from './sync-wake.js';

/**
 * D27 with Redis: the holding instance learns of the write at once, not at a poll an hour away, and of
 * a revocation with it.
 */
describe('held sync requests across instances, through Redis', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  /** A and B share Redis; B's poll of the log would not come for an hour. */
  const throughRedis = (check: (a: Instance, b: Instance) => Promise<void>) => {
    const redisUrl = backend.redisUrl;
    if (!redisUrl) throw new Error('the production backend has no Redis');
    return withInstances(backend, { a: { redisUrl }, b: { redisUrl, changePollMs: 3_600_000 } }, check);
  };

  it('a write on A wakes a request held on B, whose poll would not come for an hour, within a second', () =>
    throughRedis((a, b) => expectWokenAcross(a, b, 'acme')));

  it('a key revoked on A while its request is held on B gets 401 there when a change wakes it', () =>
    throughRedis((a, b) => expectRevokedAcross(a, b, 'acme')));
});
